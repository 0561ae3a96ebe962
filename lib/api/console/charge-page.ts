// A charge's whole life on one page: the charge, every key that acted on it (phase, lease,
// processor calls with their keys and outcomes, the stored answer), its outbox rows in
// sequence with their delivery state, its refunds; an action form beside what needs one.
import { html, page, table, type Frame, type Html } from "./html.ts";
import { actionForm } from "./forms.ts";
import type { ChargeLife, KeyLife, OutboxLife } from "../../ops/life.ts";

export function chargePage(frame: Frame & { csrf: string }, life: ChargeLife): Response {
  const c = life.charge;
  const back = `/console/charges/${c.id}`;
  const summary = {
    id: c.id, tenant: c.tenant, status: c.status, amount: `${c.amount_cents} ${c.currency}`, captured: c.captured_cents,
    refunded: c.refunded_cents, pendingRefund: c.pending_refund_cents, processorPaymentId: c.processor_payment_id,
    declineCode: c.decline_code, lastSequence: c.last_sequence, createdAt: c.created_at,
  };
  return page({ ...frame, title: `Charge ${c.id}` }, html`
<section><h2>Charge</h2>${table([summary])}</section>
<section><h2>Keys</h2>${life.keys.length === 0 ? html`<p class="empty">No key row left (expired and deleted, or written before keys were kept).</p>` : life.keys.map((k) => keySection(frame.csrf, k, back))}</section>
<section><h2>Outbox</h2>${outboxTable(frame.csrf, life.outbox, back)}</section>
<section><h2>Refunds, capture, cancel</h2>${table(life.refunds.map((r) => ({ id: r.id, amount: r.amount_cents, status: r.status, processorRefundId: r.processor_refund_id, failureCode: r.failure_code, createdAt: r.created_at })))}
<p>Capture and cancel are this charge's own state (status, captured) and keys above.</p></section>`);
}

function keySection(csrf: string, k: KeyLife, back: string): Html {
  const facts = {
    endpoint: k.endpoint, status: k.status, phase: k.phase, leaseUntil: k.leaseUntil, attempts: k.attempts,
    nextAttemptAt: k.nextAttemptAt, lastError: k.lastError, parkedAt: k.parkedAt, createdAt: k.createdAt, completedAt: k.completedAt,
  };
  const target = k.owner;
  const resolvable = k.status === "STARTED" && target !== null;
  return html`<article class="key${k.parkedAt ? " parked" : ""}"><h3>Key <code class="key-text">${k.key}</code> <small>keyHash ${k.keyHash}</small></h3>
${table([facts])}
<h4>Processor calls</h4>${table(k.calls.map((call) => ({ call: call.call, processorKey: call.processorKey, outcome: call.outcome })))}
<h4>Stored answer</h4>${k.responseStatus === null ? html`<p class="empty">None yet.</p>` : html`<p>${k.responseStatus}</p><pre class="answer">${k.responseBody ?? ""}</pre>`}
${resolvable ? actionForm(csrf, "resolve", target!, back) : ""}</article>`;
}

function outboxTable(csrf: string, rows: readonly OutboxLife[], back: string): Html {
  const flat = rows.map((r) => ({
    sequence: r.sequence, eventType: r.eventType, state: r.state, id: r.id, createdAt: r.createdAt, publishedAt: r.publishedAt,
    parkedAt: r.parkedAt, attempts: r.attempts, lastError: r.lastError, behind: r.behind,
  }));
  return table(flat, (i) => {
    const r = rows[i]!;
    if (r.state === "parked") return html`${actionForm(csrf, "requeue", r.id, back)}${actionForm(csrf, "discard", r.id, back)}`;
    if (r.state === "held") return i > 0 && rows[i - 1]!.state === "parked" ? actionForm(csrf, "release", back.split("/").at(-1)!, back) : html``;
    return html``;
  });
}
