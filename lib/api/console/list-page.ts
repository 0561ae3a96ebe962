// A list of what needs a person: the filter (tenant, operation, age), a page of entries with
// an action form each, the CSV export of the whole filter, and the list-wide action that
// shows its count before it runs.
import { html, page, table, type Frame } from "./html.ts";
import { actionForm, confirmForm, listActionForm, actionLabel } from "./forms.ts";
import { LIST_TITLES, pager } from "./pages.ts";
import { LIST_ACTIONS, type ActionName } from "../../ops/actions.ts";
import type { ListFilter, ListKind, ListResult } from "../../ops/lists.ts";

export const PAGE_SIZE = 50;

/** The filter as the list's query parameters (only those set). */
export function filterParams(filter: ListFilter): URLSearchParams {
  const p = new URLSearchParams();
  if (filter.tenant) p.set("tenant", filter.tenant);
  if (filter.operation) p.set("operation", filter.operation);
  if (filter.olderThanSeconds) p.set("older_than", String(filter.olderThanSeconds));
  return p;
}

export function listPage(frame: Frame & { csrf: string }, kind: ListKind, filter: ListFilter, result: ListResult, pageNo: number): Response {
  const params = filterParams(filter);
  const back = `/console/lists/${kind}?${params}`;
  const isKeys = kind === "parked-keys" || kind === "stale-keys";
  const perRow = (i: number) => {
    const target = result.targets[i];
    if (!target) return html``;
    const open = isKeys ? `/console/charges/${result.rows[i]!.chargeId}` : `/console/charges/${result.rows[i]!.aggregateId}`;
    return html`<a href="${open}">open</a> ${LIST_ACTIONS[kind].map((a) => actionForm(frame.csrf, a, target, back))}`;
  };
  return page({ ...frame, title: LIST_TITLES[kind] }, html`
<form method="get" action="/console/lists/${kind}" class="filter">
<input name="tenant" value="${filter.tenant ?? ""}" placeholder="tenant" aria-label="tenant">
<input name="operation" value="${filter.operation ?? ""}" placeholder="${isKeys ? "endpoint, e.g. POST /charges" : "event type, e.g. ChargeCreated"}" aria-label="operation">
<input name="older_than" value="${filter.olderThanSeconds ?? ""}" placeholder="older than (s)" inputmode="numeric" aria-label="older than seconds">
<button>Filter</button></form>
<p><span id="total">${result.total}</span> match. <a href="/console/export/${kind}?${params.toString()}" id="export" download>Export CSV</a></p>
${result.total > 0 ? LIST_ACTIONS[kind].map((a) => listActionForm(kind, a, params)) : ""}
${table(result.rows, perRow)}${pager(`/console/lists/${kind}`, params, pageNo, PAGE_SIZE, result.total)}`);
}

/** The count before a list-wide action; 409 when shown again because the list changed since the last count. */
export function confirmPage(frame: Frame & { csrf: string }, kind: ListKind, action: ActionName, filter: ListFilter, total: number, cap: number, status = 200): Response {
  const params = filterParams(filter);
  const touched = Math.min(total, cap);
  return page({ ...frame, title: `${actionLabel(action)}: ${LIST_TITLES[kind]}` }, html`
${status === 409 ? html`<p class="refused">The list changed since its count was shown: nothing was done. Here is the count now.</p>` : ""}
<p id="count">This will ${action} <b>${touched}</b> ${touched === 1 ? "entry" : "entries"} (the filter matches ${total} now${total > cap ? `; at most ${cap} per run` : ""}).</p>
<p>Filter: ${params.toString() || "none"}</p>
${touched > 0 ? confirmForm(frame.csrf, kind, action, params, touched) : ""}<p><a href="/console/lists/${kind}?${params.toString()}">Cancel</a></p>`, status);
}
