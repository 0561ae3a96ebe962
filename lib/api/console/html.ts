// HTML made safe by construction: every value interpolated into `html`…`` is escaped as text
// unless it is itself an Html (another template's output), so a tenant's key, body or
// metadata always shows as its characters and never becomes markup. Also the page frame.
export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ESCAPES: Readonly<Record<string, string>> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

type Value = Html | string | number | boolean | null | undefined | Date | readonly Value[];

function render(value: Value): string {
  if (value instanceof Html) return value.text;
  if (value === null || value === undefined || value === false) return "";
  if (value instanceof Date) return escapeHtml(value.toISOString());
  if (Array.isArray(value)) return value.map(render).join("");
  return escapeHtml(String(value));
}

export function html(strings: TemplateStringsArray, ...values: Value[]): Html {
  let out = strings[0]!;
  values.forEach((v, i) => (out += render(v) + strings[i + 1]!));
  return new Html(out);
}

// No inline script or style anywhere, so the policy can forbid them: a tenant's text that
// slipped past the escaping still could not run. Nothing is loaded from another origin.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

export const PAGE_HEADERS: Readonly<Record<string, string>> = {
  "content-type": "text/html; charset=utf-8",
  "content-security-policy": CSP,
  "x-content-type-options": "nosniff",
  // Never a Referer to another site. Not no-referrer: with it Chromium sends "Origin: null" on
  // the console's own form posts, which the origin check must refuse.
  "referrer-policy": "same-origin",
  "cache-control": "no-store",
};

export interface Frame {
  readonly title: string;
  /** The signed-in operator (none on the sign-in page). */
  readonly operator?: string;
  readonly csrf?: string;
}

export function page(frame: Frame, body: Html, status = 200, headers: Record<string, string> = {}): Response {
  const nav = frame.operator === undefined
    ? html``
    : html`<nav><a href="/console">Console</a> <a href="/console/lists/parked-keys">Parked keys</a> <a href="/console/lists/stale-keys">Stale keys</a>
<a href="/console/lists/parked-rows">Parked rows</a> <a href="/console/lists/held-rows">Held rows</a> <a href="/console/audit">Audit</a>
<span class="who">${frame.operator}</span>
<form method="post" action="/console/sign-out" class="inline"><input type="hidden" name="csrf" value="${frame.csrf ?? ""}"><button>Sign out</button></form></nav>`;
  const doc = html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,"><title>${frame.title} · charges console</title><link rel="stylesheet" href="/console/assets/console.css"></head>
<body>${nav}<main><h1>${frame.title}</h1>${body}</main><script src="/console/assets/console.js" defer></script></body></html>`;
  return new Response(doc.text, { status, headers: { ...PAGE_HEADERS, ...headers } });
}

/** A table of flat records, every cell as text. */
export function table(rows: readonly Readonly<Record<string, unknown>>[], extra?: (i: number) => Html, columns = rows[0] ? Object.keys(rows[0]) : []): Html {
  if (rows.length === 0) return html`<p class="empty">Nothing here.</p>`;
  return html`<table><thead><tr>${columns.map((c) => html`<th>${c}</th>`)}${extra ? html`<th></th>` : ""}</tr></thead>
<tbody>${rows.map((r, i) => html`<tr>${columns.map((c) => html`<td>${cell(r[c])}</td>`)}${extra ? html`<td>${extra(i)}</td>` : ""}</tr>`)}</tbody></table>`;
}

function cell(v: unknown): Value {
  if (v === null || v === undefined) return "";
  if (v instanceof Date || typeof v === "string" || typeof v === "number" || typeof v === "boolean") return v;
  return JSON.stringify(v);
}
