// The action forms: each POSTs to /console/actions (one target) or /console/lists/:kind/apply
// (the filtered list, after its count was shown) with the CSRF token and a required reason.
import { html, type Html } from "./html.ts";
import type { ActionName } from "../../ops/actions.ts";

const LABELS: Readonly<Record<ActionName, string>> = {
  resolve: "Resolve",
  requeue: "Requeue",
  discard: "Discard",
  release: "Release aggregate",
};

/** The extra fields of a resolve: by reading the processor (default), or the outcome read there. */
function resolveFields(): Html {
  return html`<select name="outcome" aria-label="how"><option value="retry">read the processor and drive it</option>
<option value="succeeded">succeeded, processor id:</option><option value="refused">refused, code:</option></select>
<input name="value" placeholder="pi_… / re_… / code" size="12" aria-label="processor id or code">`;
}

export function actionForm(csrf: string, action: ActionName, target: string, back: string): Html {
  return html`<form method="post" action="/console/actions" class="action" data-action="${action}" data-target="${target}">
<input type="hidden" name="csrf" value="${csrf}"><input type="hidden" name="action" value="${action}">
<input type="hidden" name="target" value="${target}"><input type="hidden" name="back" value="${back}">
${action === "resolve" ? resolveFields() : ""}<input name="reason" placeholder="reason (required)" required maxlength="500" aria-label="reason">
<button>${LABELS[action]}</button></form>`;
}

/** On a list: go to the count first (a GET: nothing changes until the confirmation's POST). */
export function listActionForm(kind: string, action: ActionName, filters: URLSearchParams): Html {
  return html`<form method="get" action="/console/lists/${kind}/confirm" class="action" data-list-action="${action}">
${[...filters].map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}">`)}<input type="hidden" name="action" value="${action}">
<button>${LABELS[action]} every entry of this filter…</button></form>`;
}

/** The confirmation: the count, the reason, then the POST. */
export function confirmForm(csrf: string, kind: string, action: ActionName, filters: URLSearchParams, count: number): Html {
  return html`<form method="post" action="/console/lists/${kind}/apply" class="action" data-confirm="${action}">
<input type="hidden" name="csrf" value="${csrf}"><input type="hidden" name="action" value="${action}"><input type="hidden" name="expected" value="${count}">
${[...filters].map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}">`)}
${action === "resolve" ? resolveFields() : ""}<input name="reason" placeholder="reason (required)" required maxlength="500" aria-label="reason">
<button>${LABELS[action]} ${count} ${count === 1 ? "entry" : "entries"}</button></form>`;
}

export const actionLabel = (action: ActionName): string => LABELS[action];
