// Scenario 13: charges through the payment processor (PAYMENT_PROCESSOR=stripe, the simulator
// in this process) while it misbehaves. Two `bun api.ts` and a relay (which runs the
// completer); clients that retry with the same key on 0/409/502/503/504, and clients that give
// up after their first unknown answer (their keys must be finished by the completer). Each
// simulator fault in turn for a while (500 before and after the effect, hang, dropped answer,
// refused connections), then captures whose answers are lost, then an API SIGKILLed while
// calls are held at the processor. One charge in five is authorized ("capture": "manual") and
// then captured, under the same faults. A third of the other charges that succeed are refunded
// in part by the same client, and so is every charge paid with a card whose refunds the
// processor fails. Then two refunds whose clients give up at the first 502: one whose answer
// is a 500 the processor keeps under the key after it refunded, one a 500 kept before any
// effect; the completer resolves both by listing the payment's refunds (no operator).
// Invariants come from the simulator's ledger and the database: at most one confirmed payment
// per charge, at most one capture of it, and the charge's final state is the processor's
// (authorized: confirmed, nothing captured; succeeded: captured what we say); every key
// finished, none parked; one processor refund per refund that succeeded, none that succeeded
// for one that failed; every finished charge's events delivered once.
import { startEntrypoint, type Service } from "../testkit/processes.ts";
import { startProcessorSim, SIM_KEY, type ProcessorSim } from "../testkit/processor-sim.ts";
import type { SimFaultKind } from "../dev/processor-sim/types.ts";
import { authEnv } from "../testkit/auth.ts";
import { sleep, waitUntil } from "../testkit/wait.ts";
import { chaosChild, chaosServices, hardKill, startRelay } from "./lib/harness.ts";
import { chargeHeaders, Tally } from "./lib/client.ts";
import { deliveryInvariants, scenario, type Ctx } from "./lib/report.ts";
import { refundInvariants, resolvedByListing, type Stored500 } from "./lib/refund-checks.ts";
import { startSubscriber } from "./lib/subscriber.ts";

// Short bounds, so a hung call and an abandoned lease (4 × this + 5 s) resolve within the run.
const TIMEOUT_MS = 800;
const FAULT_PHASE_MS = 2500;
const WORKERS = 6;
// A careful client's pause before it resends (the API answers Retry-After: 1; shorter keeps the run short).
const RETRY_PAUSE_MS = 150;
const RETRY_DEADLINE_MS = 60_000;
const FAULTS: readonly SimFaultKind[] = ["500-before", "500-after", "hang", "drop-after", "refuse"];

await scenario("13", "charges through a misbehaving payment processor", async (ctx) => {
  const sim = await startProcessorSim({ latencyMs: 5 });
  try {
    return await run(ctx, sim);
  } finally {
    await sim.stop();
  }
});

async function run(ctx: Ctx, sim: ProcessorSim): Promise<Awaited<ReturnType<typeof deliveryInvariants>>> {
  const { sql, checks, tally } = ctx;
  const processor = { PAYMENT_PROCESSOR: "stripe", PAYMENT_PROCESSOR_URL: sim.url, PAYMENT_PROCESSOR_KEY: SIM_KEY, PAYMENT_PROCESSOR_TIMEOUT_MS: String(TIMEOUT_MS) };
  const { mqttUrl } = await chaosServices();
  // 8 connections each, as scenario 14's: two APIs, a relay and a subscriber fit on a server
  // other work shares (a run aborted on "too many clients" with the default 32 each).
  const apiEnv = { DATABASE_URL: ctx.db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: ctx.prefix, API_POOL_SIZE: "8", ...authEnv(), ...processor };
  const apis: Service[] = [await startEntrypoint("api", chaosChild("api-a", apiEnv)), await startEntrypoint("api", chaosChild("api-b", apiEnv))];
  ctx.sub = await startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer);
  await startRelay(ctx.db.url, ctx.prefix, undefined, processor);

  let stopping = false;
  const givenUp = new Set<string>();
  const keys = new Set<string>();
  // Refunds' answers apart: their 201 bodies are refunds, not charges (deliveryInvariants reads the charges' tally).
  const refundTally = new Tally();
  const worker = async (w: number): Promise<void> => {
    for (let i = 0; !stopping; i++) {
      const key = crypto.randomUUID();
      keys.add(key);
      const declined = i % 7 === 3;
      // One charge in seven paid with a card whose refunds the processor fails.
      const refundFails = i % 7 === 5;
      const manual = !declined && !refundFails && i % 5 === 1;
      const amountCents = 100 + ((w * 37 + i) % 900);
      const paymentMethod = declined ? "pm_card_chargeDeclined" : refundFails ? "pm_card_refundFail" : "pm_card_visa";
      const body = JSON.stringify({ amountCents, paymentMethod, ...(manual && { capture: "manual" }) });
      // One worker in three gives up at its first unknown answer: the completer finishes its key.
      const patient = w % 3 !== 0;
      const deadline = Date.now() + RETRY_DEADLINE_MS;
      // Sent until it is not an unknown outcome (or the client gives up); the last answer.
      const send = async (path: string, k: string, b: string, into = tally): Promise<{ status: number; text: string }> => {
        for (;;) {
          const api = apis[(i + w) % apis.length]!;
          const a = await post(api.base, path, k, b, into);
          if (![0, 409, 502, 503, 504].includes(a.status)) return a;
          if (!patient || Date.now() > deadline) {
            givenUp.add(k);
            return a;
          }
          await sleep(RETRY_PAUSE_MS);
        }
      };
      const created = await send("/charges", key, body);
      if (manual && created.status === 201) {
        // Capture all but 50 cents of it (the rest released), with a key of its own.
        const id = (JSON.parse(created.text) as { id: string }).id;
        await send(`/charges/${id}/capture`, crypto.randomUUID(), JSON.stringify({ amountCents: amountCents - 50 }));
      } else if (created.status === 201 && (i % 3 === 1 || refundFails)) {
        // Half of it back, with a key of its own.
        const id = (JSON.parse(created.text) as { id: string }).id;
        await send(`/charges/${id}/refunds`, crypto.randomUUID(), JSON.stringify({ amountCents: Math.floor(amountCents / 2) }), refundTally);
      }
    }
  };
  const load = Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));

  // Each fault for a while, on every kind of call, now and then.
  for (const kind of FAULTS) {
    sim.setFaults({ rules: [{ kind, probability: kind === "refuse" ? 1 : 0.3 }] });
    await sleep(FAULT_PHASE_MS);
    sim.clearFaults();
    await sim.settled();
    await sleep(FAULT_PHASE_MS / 2);
  }
  // Captures whose answers are lost: stored 500s after the capture, and dropped answers.
  for (const kind of ["500-after", "drop-after"] as const) {
    sim.setFaults({ rules: [{ kind, op: "capture", probability: 0.7 }] });
    await sleep(FAULT_PHASE_MS);
    sim.clearFaults();
    await sim.settled();
  }
  // An API SIGKILLed while its confirms are held at the processor, then started again.
  sim.setFaults({ rules: [{ kind: "hang", op: "confirm" }] });
  await waitUntil(() => sim.requests().some((r) => r.op === "confirm" && r.state === "hung"), 20_000, "a confirm held at the processor");
  await hardKill(apis[0]!.child);
  sim.clearFaults();
  apis[0] = await startEntrypoint("api", { ...chaosChild("api-a", apiEnv), port: apis[0]!.port });
  await sleep(FAULT_PHASE_MS);
  stopping = true;
  await load;
  // The two refunds of #39: a 500 kept under the key after the refund, and one before any effect.
  const stored500 = await storedFiveHundreds(apis[1]!.base, sim, tally, refundTally, keys);

  // No client asks any more: the completer (in the relay) finishes every key left STARTED.
  const started = async () => (await sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where status = 'STARTED'`)[0]?.n ?? -1;
  await waitUntil(async () => (await started()) === 0, 60_000, "every key finished").catch(() => {});
  const left = await started();
  checks.check(left === 0, "every key reached a final state (the completer finished the abandoned ones)", `${left} still STARTED`);
  const [parked] = await sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where parked_at is not null`;
  checks.check(parked?.n === 0, "no key parked", `${parked?.n} parked`);
  checks.check(givenUp.size > 0, "some clients gave up on an unknown outcome", `${givenUp.size} keys`);

  await ledgerInvariants(ctx, sim, keys);
  await refundInvariants(ctx, sim, refundTally, stored500);
  const resolved = await resolvedByListing(sql);
  console.log(`  figure: refunds resolved without an operator: ${resolved.unknown} of ${resolved.refunds} refunds saw an unknown outcome, ${resolved.kept500} of them a 500 the processor kept under the key; ${resolved.parked} parked`);
  return deliveryInvariants(ctx, 30_000);
}

/**
 * Two charges, then a refund of each whose processor answer is a 500 kept under its key: after
 * the refund, then before any effect. Each client gives up at the 502; the completer resolves
 * both. The refunds' keys, by the fault.
 */
async function storedFiveHundreds(base: string, sim: ProcessorSim, tally: Tally, refundTally: Tally, keys: Set<string>): Promise<Stored500> {
  const out: Partial<Record<keyof Stored500, string>> = {};
  for (const kind of ["500-after", "500-before"] as const) {
    const chargeKey = crypto.randomUUID();
    keys.add(chargeKey);
    const charged = await post(base, "/charges", chargeKey, JSON.stringify({ amountCents: 2000, paymentMethod: "pm_card_visa" }), tally);
    if (charged.status !== 201) throw new Error(`the charge for the ${kind} refund answered ${charged.status}`);
    const chargeId = (JSON.parse(charged.text) as { id: string }).id;
    const key = crypto.randomUUID();
    sim.setFaults({ rules: [{ kind, op: "refund", times: 1 }] });
    const first = await post(base, `/charges/${chargeId}/refunds`, key, JSON.stringify({ amountCents: 1500 }), refundTally);
    sim.clearFaults();
    if (first.status !== 502) throw new Error(`the ${kind} refund answered ${first.status}, not 502`);
    out[kind] = key;
  }
  return out as Stored500;
}

/** POST `path` with its JSON body; the status (0: no answer), tallied, and the body. */
async function post(base: string, path: string, key: string, body: string, tally: Tally): Promise<{ status: number; text: string }> {
  let status = 0;
  let text = "";
  let replayed = false;
  try {
    const r = await fetch(`${base}${path}`, { method: "POST", headers: await chargeHeaders(key), body, signal: AbortSignal.timeout(15_000) });
    status = r.status;
    text = await r.text();
    replayed = r.headers.get("idempotent-replayed") === "true";
  } catch {}
  tally.answers.push({ key, amountCents: 0, status, replayed, body: text, at: Date.now() });
  return { status, text };
}

interface ChargeRow {
  readonly id: string;
  readonly amount_cents: number;
  readonly status: string;
  readonly processor_payment_id: string | null;
  readonly captured_cents: number | null;
}

/** The simulator's ledger against the charges: money moved once per charge, and our state is the processor's. */
async function ledgerInvariants(ctx: Ctx, sim: ProcessorSim, keys: Set<string>): Promise<void> {
  const { sql, checks } = ctx;
  const ledger = sim.ledger();
  const charges = await sql<ChargeRow[]>`select id::text, amount_cents, status, processor_payment_id, captured_cents from charges`;
  const byCharge = new Map<string, typeof ledger.paymentIntents>();
  for (const p of ledger.paymentIntents) {
    const id = p.metadata.charge_id ?? "";
    byCharge.set(id, [...(byCharge.get(id) ?? []), p]);
  }
  const twice = charges.filter((c) => (byCharge.get(c.id) ?? []).reduce((n, p) => n + p.confirmations, 0) > 1);
  checks.check(twice.length === 0, "at most one confirmed payment per charge (no charge paid twice)", `${twice.length} charges paid more than once`);
  const mismatched = charges.filter((c) => {
    const confirmed = (byCharge.get(c.id) ?? []).filter((p) => p.confirmations > 0);
    if (c.status === "succeeded") return confirmed.length !== 1 || confirmed[0]!.id !== c.processor_payment_id || confirmed[0]!.amountCaptured !== (c.captured_cents ?? c.amount_cents);
    // Authorized (a manual charge not captured, its client gone): confirmed, nothing captured.
    if (c.status === "authorized") return confirmed.length !== 1 || confirmed[0]!.id !== c.processor_payment_id || confirmed[0]!.status !== "requires_capture" || confirmed[0]!.amountCaptured !== 0;
    return confirmed.length !== 0;
  });
  checks.check(mismatched.length === 0, "each charge's state is the processor's: succeeded with its one confirmed payment captured for what we say (its amount, or its capture), authorized with nothing captured, failed with none", `${mismatched.length} differ, e.g. ${mismatched[0]?.id}`);
  const manualCaptured = charges.filter((c) => c.captured_cents !== null).length;
  checks.check(manualCaptured > 0, "some manual charges were captured", `${manualCaptured}`);
  const [captureEvents] = await sql<{ n: number }[]>`select count(*)::int as n from outbox where event_type = 'ChargeCaptured'`;
  checks.check(captureEvents?.n === manualCaptured, "one ChargeCaptured per captured charge", `${captureEvents?.n} events for ${manualCaptured} captured charges`);
  const known = new Set(charges.map((c) => c.id));
  const stray = ledger.paymentIntents.filter((p) => p.confirmations > 0 && !known.has(p.metadata.charge_id ?? ""));
  checks.check(stray.length === 0, "no money moved for a charge we have no row of", `${stray.length} confirmed payments without a charge`);
  // A key whose only requests got no answer (the API killed under them) and whose client gave
  // up may have no row: its phase 1 never committed. Every other key has its row and its charge.
  const answered = new Set(ctx.tally.answers.filter((a) => a.status !== 0 && keys.has(a.key)).map((a) => a.key));
  const rows = await sql<{ key: string; charge: string | null }[]>`
    select k.key, (k.resume->>'chargeId') as charge from idempotency_keys k where k.endpoint = 'POST /charges'`;
  const withRow = new Set(rows.map((r) => r.key));
  const missing = [...answered].filter((key) => !withRow.has(key));
  checks.check(missing.length === 0 && rows.length <= keys.size, "every client key that got an answer has its key row", `${missing.length} without one`);
  checks.check(charges.length === rows.length && rows.every((r) => r.charge !== null && known.has(r.charge)), "one charge per key row", `${charges.length} charges for ${rows.length} key rows`);
  const captured = charges.filter((c) => c.status === "succeeded").reduce((n, c) => n + (c.captured_cents ?? c.amount_cents), 0);
  checks.check(ledger.totals.captured === captured, "the processor captured exactly what our succeeded charges add up to", `${ledger.totals.captured} captured, ${captured} in succeeded charges`);
}
