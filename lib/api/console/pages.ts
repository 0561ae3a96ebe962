// The console's small pages: sign-in, refusals, the home page (find, the backlog chart, what
// needs a person), find's matches, an action's result and the audit trail.
import { html, page, table, type Frame, type Html } from "./html.ts";
import type { Found } from "../../ops/life.ts";
import type { ActionResult, AuditRow, ListActionResult } from "../../ops/actions.ts";
import { LIST_KINDS, type ListKind } from "../../ops/lists.ts";

export const LIST_TITLES: Readonly<Record<ListKind, string>> = {
  "parked-keys": "Parked keys",
  "stale-keys": "Stale STARTED keys",
  "parked-rows": "Parked outbox rows",
  "held-rows": "Held outbox rows",
};

const SIGN_IN_WHY = {
  missing: "Sign in with an operator token (a JWT whose scope holds charges:operate): `bun run token --operator <your name>` mints one locally, and `bun run dev` prints a link that signs you in.",
  invalid: "That token did not verify (expired, another issuer or secret, or not a JWT). Sign in again.",
  "no-key-source": "The console needs the API's token verification: set AUTH_JWT_SECRET or AUTH_JWKS_URL.",
} as const;

export function signInPage(why: keyof typeof SIGN_IN_WHY, status = 401): Response {
  return page({ title: "Sign in" }, html`<p>${SIGN_IN_WHY[why]}</p>
<form method="post" action="/console/sign-in"><label>Operator token <input name="token" type="password" autocomplete="off" required></label> <button>Sign in</button></form>`, status);
}

export function forbiddenPage(): Response {
  return page({ title: "Not an operator" }, html`<p>This token is valid but its scope does not hold charges:operate: a tenant's token cannot open the console.</p>
<p><a href="/console/sign-in">Sign in with an operator token</a></p>`, 403);
}

export function refusedPage(frame: Frame, status: number, message: string): Response {
  return page({ ...frame, title: "Refused" }, html`<p class="refused">${message}</p><p><a href="/console">Back to the console</a></p>`, status);
}

export function findForm(q = "", tenant = ""): Html {
  return html`<form method="get" action="/console/find" class="find" role="search">
<input name="q" value="${q}" placeholder="idempotency key, charge id, pi_… / re_…, event id" size="48" aria-label="find" required>
<input name="tenant" value="${tenant}" placeholder="tenant (for a key)" size="16" aria-label="tenant"> <button>Find</button></form>`;
}

export function homePage(frame: Frame, counts: Readonly<Record<ListKind, number>>): Response {
  return page(frame, html`${findForm()}
<section><h2>Backlog</h2><div id="backlog" data-src="/console/backlog.json">
<p class="figures"><span>pending <b data-k="pending">…</b></span> <span>oldest pending <b data-k="oldestPendingAgeSeconds">…</b> s</span>
<span>parked <b data-k="parked">…</b></span> <span>held <b data-k="held">…</b></span> <span>published last minute <b data-k="lastMinute">…</b></span></p>
<svg id="backlog-chart" viewBox="0 0 600 160" role="img" aria-label="published per minute and pending rows"></svg>
<p class="legend"><span class="bar-key"></span> published per minute (last 15) <span class="line-key"></span> pending rows (since this page opened)</p></div></section>
<section><h2>Needs a person</h2><ul class="needs">${LIST_KINDS.map((k) => html`<li><a href="/console/lists/${k}">${LIST_TITLES[k]}</a> <b data-count="${k}">${counts[k]}</b></li>`)}</ul></section>`);
}

export function findPage(frame: Frame, q: string, tenant: string, found: readonly Found[]): Response {
  const body = found.length === 0
    ? html`<p class="empty">Nothing matches.</p>`
    : table(found.map((f) => ({ by: f.by, tenant: f.tenant, detail: f.detail, chargeId: f.chargeId })), (i) => html`<a href="/console/charges/${found[i]!.chargeId}">open</a>`);
  return page({ ...frame, title: "Find" }, html`${findForm(q, tenant)}${body}`, found.length === 0 ? 404 : 200);
}

export function actionResultPage(frame: Frame, result: ActionResult, back: string): Response {
  const message = result.done
    ? `${result.action} ${result.target}: done ${JSON.stringify(result.detail)}`
    : `${result.action} ${result.target}: not done (${result.reason})`;
  return page({ ...frame, title: result.done ? "Done" : "Not done" }, html`<p class="${result.done ? "done" : "refused"}" id="result">${message}</p><p><a href="${back}">Back</a></p>`, result.done ? 200 : 409);
}

export function listResultPage(frame: Frame, kind: ListKind, result: ListActionResult): Response {
  const failures = result.results.filter((r) => !r.done).map((r) => ({ target: r.target, reason: r.done ? "" : r.reason }));
  return page({ ...frame, title: "Done" }, html`<p class="done" id="result">${result.done} done, ${result.failed} not done, of ${result.matched} matched.</p>
${failures.length > 0 ? table(failures) : ""}<p><a href="/console/lists/${kind}">Back to ${LIST_TITLES[kind]}</a></p>`);
}

export function auditPage(frame: Frame, rows: readonly AuditRow[], total: number, pageNo: number, pageSize: number): Response {
  const flat = rows.map((r) => ({ at: r.at, actor: r.actor, via: r.via, action: r.action, target: r.target, reason: r.reason, outcome: JSON.stringify(r.outcome) }));
  return page({ ...frame, title: "Audit" }, html`<p>${total} actions, newest first.</p>${table(flat)}${pager("/console/audit", new URLSearchParams(), pageNo, pageSize, total)}`);
}

export function pager(path: string, params: URLSearchParams, pageNo: number, pageSize: number, total: number): Html {
  const at = (n: number) => {
    const p = new URLSearchParams(params);
    p.set("page", String(n));
    return `${path}?${p}`;
  };
  const last = Math.max(1, Math.ceil(total / pageSize));
  return html`<p class="pager">${pageNo > 1 ? html`<a href="${at(pageNo - 1)}">previous</a>` : ""} page ${pageNo} of ${last} ${pageNo < last ? html`<a href="${at(pageNo + 1)}">next</a>` : ""}</p>`;
}
