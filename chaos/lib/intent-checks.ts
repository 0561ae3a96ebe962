// Scenario 14's invariants: what the client's intents ended with, against the rows and stored
// answers in the database, the payment processor's ledger (the simulator's), and what the
// fault proxy saw on the wire.
import type { FaultProxy } from "../../testkit/http-fault-proxy.ts";
import type { ProcessorSim } from "../../testkit/processor-sim.ts";
import { amountOf, cardOf, DECLINED_CARD, refundOf, type Intent, type IntentLoad, type IntentLog } from "./intents.ts";
import type { Ctx, Totals } from "./report.ts";

/** The client's tries, as its onTry saw them. */
export interface Tries {
  first: number;
  total: number;
  noAnswer: number;
  readonly byStatus: Map<number, number>;
  /** Tries sent with a key that had already been answered 402 (final: must stay 0). */
  afterFinal402: number;
  /** Keys answered 402. */
  readonly declined: Set<string>;
}

export interface IntentRun {
  readonly ctx: Ctx;
  readonly log: IntentLog;
  readonly load: IntentLoad;
  readonly proxy: FaultProxy;
  readonly sim: ProcessorSim;
  readonly tries: Tries;
  /** The most retries the client's budget allows over the run (its documented bound). */
  readonly budgetBound: number;
  /** Retries the client's budget granted. */
  readonly granted: number;
  readonly seconds: number;
}

const sum = (values: readonly number[]): number => values.reduce((n, v) => n + v, 0);

export async function intentInvariants(run: IntentRun): Promise<Totals> {
  const { ctx, log } = run;
  const failures = log.failures();
  ctx.checks.check(failures.length === 0, `every intent (${log.finished}) ended with its final answer within its deadline`,
    `${failures.length} failed, e.g. ${failures.slice(0, 2).map((f) => f.failure).join(" | ")}`);
  const charges = log.intents.filter((i) => i.kind === "charge" && i.failure === undefined);
  const refunds = log.intents.filter((i) => i.kind === "refund" && i.failure === undefined);
  outcomeChecks(run, charges);
  await rowChecks(run, charges, refunds);
  ledgerChecks(run, charges, refunds);
  wireChecks(run);
  const [outbox] = await ctx.sql<{ n: number }[]>`select count(*)::int as n from outbox`;
  const [rows] = await ctx.sql<{ n: number }[]>`select count(*)::int as n from charges`;
  // Lost here: intents that did not end with their final answer (delivery is scenario 13's).
  return { charges: rows?.n ?? 0, outbox: outbox?.n ?? 0, unpublished: 0, lost: failures.length };
}

/** Each charge intent ended as its card says, and a 402 was final. */
function outcomeChecks(run: IntentRun, charges: readonly Intent[]): void {
  const { checks } = run.ctx;
  const wrong = charges.filter((i) => {
    const declined = cardOf(i.index, run.load) === DECLINED_CARD;
    return declined ? i.status !== 402 || i.value?.declineCode === undefined : i.status !== 201 || i.value?.status !== "succeeded";
  });
  checks.check(wrong.length === 0 && charges.some((i) => i.status === 402), "each charge ended as its card says: 201 succeeded, or 402 card-declined for the declined card",
    `${wrong.length} differ`);
  checks.check(run.tries.afterFinal402 === 0, "a 402 was final: no try with its key after it", `${run.tries.afterFinal402} tries after a 402`);
}

/** The rows and the answers stored under the keys, against the intents. */
async function rowChecks(run: IntentRun, charges: readonly Intent[], refunds: readonly Intent[]): Promise<void> {
  const { checks, sql } = run.ctx;
  const paid = charges.filter((i) => i.status === 201).length;
  const [rows] = await sql<{ succeeded: number; failed: number; other: number; refunds: number; refunded: number }[]>`
    select (select count(*)::int from charges where status = 'succeeded') as succeeded,
           (select count(*)::int from charges where status = 'failed') as failed,
           (select count(*)::int from charges where status not in ('succeeded', 'failed')) as other,
           (select count(*)::int from refunds) as refunds,
           (select count(*)::int from refunds where status = 'succeeded') as refunded`;
  checks.check(rows?.succeeded === paid && rows.failed === charges.length - paid && rows.other === 0,
    "exactly one charge row per charge intent: succeeded for each 201, failed for each 402",
    `${rows?.succeeded} succeeded, ${rows?.failed} failed, ${rows?.other} neither, for ${paid} 201s and ${charges.length - paid} 402s`);
  checks.check(rows?.refunds === refunds.length && rows.refunded === refunds.length && refunds.length === paid,
    "exactly one refund, succeeded, per refund intent, one per succeeded charge", `${rows?.refunds} refunds (${rows?.refunded} succeeded) for ${refunds.length} intents, ${paid} succeeded charges`);
  const keys = await sql<{ key: string; status: string; code: number | null; body: string | null }[]>`
    select key, status, response_status as code, response_body as body from idempotency_keys`;
  const unfinished = keys.filter((k) => k.status !== "COMPLETED" || (k.code !== 201 && k.code !== 402));
  checks.check(unfinished.length === 0, "every key is COMPLETED with a 201 or a 402 (no 5xx ever stored)",
    `${unfinished.length} other, e.g. ${unfinished[0]?.status} ${unfinished[0]?.code}`);
  const byKey = new Map(keys.map((k) => [k.key, k.body ?? undefined]));
  const differ = [...charges, ...refunds].filter((i) => !sameJson(byKey.get(i.idempotencyKey ?? ""), i.value));
  checks.check(differ.length === 0, "each intent's final answer (201 or 402) is what the API stored under its key",
    `${differ.length} differ or have no stored answer under the client's key`);
}

/** The processor's ledger: money taken once per charge intent, and only what the intents were answered. */
function ledgerChecks(run: IntentRun, charges: readonly Intent[], refunds: readonly Intent[]): void {
  const { checks } = run.ctx;
  const ledger = run.sim.ledger();
  const confirmations = new Map<string, number>();
  for (const p of ledger.paymentIntents) {
    const id = p.metadata.charge_id ?? "";
    confirmations.set(id, (confirmations.get(id) ?? 0) + p.confirmations);
  }
  const twice = [...confirmations.values()].filter((n) => n > 1).length;
  checks.check(twice === 0, "at most one confirmed payment per charge at the processor", `${twice} charges paid more than once`);
  const paid = charges.filter((i) => i.status === 201);
  const taken = [...confirmations.values()].filter((n) => n === 1).length;
  const expected = sum(paid.map((i) => amountOf(i.index)));
  checks.check(taken === paid.length && ledger.totals.captured === expected,
    "the processor took exactly the charges answered 201: one payment each, for their amounts",
    `${taken} payments, ${ledger.totals.captured} captured, for ${paid.length} charges of ${expected}`);
  const refunded = sum(refunds.map((i) => refundOf(i.index)));
  checks.check(ledger.refunds.length === refunds.length && ledger.totals.refunded === refunded,
    "the processor refunded exactly the refunds answered 201: one each, for their amounts",
    `${ledger.refunds.length} refunds, ${ledger.totals.refunded} refunded, for ${refunds.length} refunds of ${refunded}`);
}

/** What the proxy saw and the client's budget, and that every fault happened. */
function wireChecks(run: IntentRun): void {
  const { checks } = run.ctx;
  const { proxy, tries, log } = run;
  const twoBodies = [...proxy.bodiesByKey.values()].filter((bodies) => bodies.size > 1).length;
  checks.check(twoBodies === 0 && proxy.bodiesByKey.size > 0, "no key was ever sent with two bodies (seen at the proxy)", `${twoBodies} keys with two`);
  const retries = tries.total - tries.first;
  const bound = run.budgetBound;
  checks.check(retries === run.granted && retries <= bound, "the retries stayed within the client's budget",
    `${retries} retries, ${run.granted} granted, bound ${Math.floor(bound)}`);
  const c = proxy.counts;
  checks.check(c.requests === tries.total, "the proxy saw exactly the client's tries (no hidden resend)", `${c.requests} requests at the proxy, ${tries.total} tries`);
  const status = (n: number): number => tries.byStatus.get(n) ?? 0;
  // What the API answered, counted at the proxy before the answer's fate: a 504 the proxy then
  // dropped was still answered (a short run sees only a few, and a third of answers are dropped).
  const answers = [...proxy.answersByKey.values()].flat();
  const api = (n: number): number => answers.filter((s) => s === n).length;
  const replays = log.intents.filter((i) => i.replayed).length;
  checks.check(c.drop > 0 && c.reset > 0 && c.delay > 0 && c.unavailable > 0 && replays > 0 && api(502) > 0 && api(504) > 0 && api(503) > 0,
    "faults happened: answers dropped, resets, held answers, the proxy's 503s, the API's 502s, 503s and 504s, and replays came back",
    `drop ${c.drop}, reset ${c.reset}, delay ${c.delay}, proxy 503 ${c.unavailable}, API 502 ${api(502)}, 503 ${api(503)}, 504 ${api(504)}, replays ${replays}`);
  console.log(`  intents ${log.finished} (${log.intents.filter((i) => i.status === 402).length} declined), tries ${tries.total} (${retries} retries, ${((100 * retries) / tries.total).toFixed(1)} %; ` +
    `${tries.noAnswer} without an answer), replays ${replays}; answers 409 ${status(409)}, 502 ${status(502)}, 503 ${status(503)}, 504 ${status(504)}; ` +
    `proxy: ${c.requests} requests, ${c.drop} dropped, ${c.reset} reset, ${c.delay} held, ${c.unavailable} 503s, ${c.unrouted} unrouted, ` +
    `${c.cut} cut by the kill; ${run.seconds.toFixed(1)} s`);
}

function sameJson(stored: string | undefined, answered: Readonly<Record<string, unknown>> | undefined): boolean {
  if (stored === undefined || answered === undefined) return false;
  return JSON.stringify(JSON.parse(stored)) === JSON.stringify(answered);
}
