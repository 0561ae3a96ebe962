// Scenario 14: answers lost. The project's client (charges-outbox/client) sends charge intents
// through the payment processor (PAYMENT_PROCESSOR=stripe, the simulator in this process), most
// with a card that pays and one in DECLINE_EVERY with one that is declined (a 402 stored under
// its key, final), and refunds part of every charge that succeeded; 50 intents at a time,
// through a fault proxy on raw TCP (testkit/http-fault-proxy.ts) in front of two `bun api.ts`
// processes, the client with its default options (none but baseUrl and token: users get the
// defaults). The proxy forwards every request, then drops 30 % of the answers after the
// server answered, resets some connections halfway through the request, holds others back,
// and answers some itself with a 503. Then the processor fails
// for a while (500s, then hangs, then refused connections: the API answers 502, 504, 503,
// storing nothing), and later one API process is SIGKILLed mid-load and started again.
// Proves the client's side of the guarantee: one charge or refund per intent, at most one
// payment taken per charge, each intent's final answer (201 or 402) is the one stored under its
// key, one body per key, retries within the budget, no intent failing while the API is up.
// CHAOS_CLIENT_MUTATION=new-key-per-try makes the client send a new key on every try (red).
// CHAOS_CLIENT_CHECKOUT=<dir> runs the client of another checkout (a git worktree of an older
// commit: the budget before it was paid by successes, red; docs/chaos.md).
//
// No relay: the client never gives up on a key within its deadline (an intent that does is a
// violation), so every key is finished by the client's own next try: at once after an unknown
// outcome (the lease is given back), after LEASE_MS when its holder was SIGKILLed. A completer
// would finish keys a client abandoned and hide exactly that failure. Delivery is scenario 13's.
import type { ChargesClient, TryReport } from "charges-outbox/client";
import type { SimFaults } from "../dev/processor-sim/types.ts";
import { tokenFor } from "../testkit/auth.ts";
import { seeded, sharesDecider, startFaultProxy, type FaultProxy } from "../testkit/http-fault-proxy.ts";
import { processorEnv } from "../testkit/processor.ts";
import { startProcessorSim, type ProcessorSim } from "../testkit/processor-sim.ts";
import { sleep, waitUntil } from "../testkit/wait.ts";
import { hardKill, startApi } from "./lib/harness.ts";
import { intentInvariants, type Tries } from "./lib/intent-checks.ts";
import { IntentLog, newKeyPerTry, runIntents, type IntentLoad } from "./lib/intents.ts";
import { scenario, type Ctx } from "./lib/report.ts";

// Charges sent (each that succeeds is also refunded): 1,000 charges make 1,875 intents, 35 to
// 55 s of load on a loaded 2-core machine (a third of the tries lost), at most 65 s with the
// start, within run-all's bound (60 s + 2 × the soak: 100 s in CI). The private-dir smoke's short
// soak (10 s: an 80 s bound, on the embedded services) sends 600, 1,125 intents, about 40 s.
const SOAK_SECONDS = Number(process.env.CHAOS_SOAK_SECONDS ?? 60);
const CHARGES = SOAK_SECONDS >= 20 ? 1000 : 600;
const CONCURRENCY = 50;
// Shares of the requests: answer dropped after the server answered, reset mid-request, held
// back, a 503 from the proxy itself (Retry-After: 1): 40 % of the tries lost or late. Seeded,
// so a run's faults can be replayed (CHAOS_SEED).
const FAULTS = { drop: 0.3, reset: 0.05, delay: 0.03, unavailable: 0.02 } as const;
const SEED = Number(process.env.CHAOS_SEED ?? 14);
// How long a held answer is held: a slow answer, within the client's default per-try timeout (10 s).
const HELD_ANSWER_MS = 3_000;
// The API's bound on each processor call: short, so a hung call is a 504 within a try, and
// the lease of a SIGKILLed holder (4 × this + 5 s, lib/idempotency/drive.ts) ends soon.
const PROCESSOR_TIMEOUT_MS = 800;
const LEASE_MS = 4 * PROCESSOR_TIMEOUT_MS + 5_000;
// Each of the processor's failures lasts this long, back to back: the outage is 3 of them.
const OUTAGE_PHASE_MS = 1_500;
const OUTAGE_MS = 3 * OUTAGE_PHASE_MS;
// What the API (Retry-After: 1) and the proxy (Retry-After: 1) ask the client to wait.
const RETRY_AFTER_MS = 1_000;
// An intent's deadline outlasts the worst it can meet: the whole outage, then its key held by
// a killed API until the lease ends, a held answer and a Retry-After; twice that, for a loaded
// machine. The outage and the kill never overlap (the kill waits for the outage's end).
const DEADLINE_MS = 2 * (OUTAGE_MS + LEASE_MS + HELD_ANSWER_MS + RETRY_AFTER_MS);
const LOAD: IntentLoad = { charges: CHARGES, concurrency: CONCURRENCY, deadlineMs: DEADLINE_MS, declineEvery: 8 };
// The outage begins once this many intents have finished, the kill once this many have.
const OUTAGE_AFTER_INTENTS = Math.floor(CHARGES * 0.4);
const KILL_AFTER_INTENTS = Math.floor(CHARGES * 1.1);
const MUTATION = process.env.CHAOS_CLIENT_MUTATION;
const CHECKOUT = process.env.CHAOS_CLIENT_CHECKOUT;
type ClientModule = typeof import("charges-outbox/client");

const HANG: SimFaults = { rules: [{ kind: "hang" }] };
// A short run can end the hang before any try reached it (the clients wait out the 500s' Retry-After):
// the hang lasts until the API has answered a 504, up to this long.
const FIRST_504_TIMEOUT_MS = 15_000;

// The processor failing: 500s (before the effect; after it for some confirmations), then every
// call hanging past the API's bound, then every connection refused. A refund's processor key
// never changes (a new key could refund twice), so a 500 stored under it would leave the
// refund unknown for a day (docs/api.md): refunds get their answer dropped after the effect
// instead, which the same key replays.
const OUTAGE: readonly SimFaults[] = [
  {
    rules: [
      { kind: "500-after", op: "confirm", probability: 0.3 },
      { kind: "500-before", op: "confirm" },
      { kind: "500-before", op: "create" },
      { kind: "500-before", op: "retrieve" },
      { kind: "drop-after", op: "refund" },
    ],
  },
  HANG,
  { rules: [{ kind: "refuse" }] },
];

// Two APIs and their restart on a shared server (max_connections 100 by default): 8
// connections each instead of 32 leave room for the rest.
const API_POOL = { API_POOL_SIZE: "8" };

await scenario("14", "answers lost between the client and two APIs, the processor failing", async (ctx) => {
  const sim = await startProcessorSim();
  try {
    return await run(ctx, sim);
  } finally {
    await sim.stop();
  }
});

async function run(ctx: Ctx, sim: ProcessorSim): ReturnType<typeof intentInvariants> {
  const env = { ...API_POOL, ...processorEnv(sim, PROCESSOR_TIMEOUT_MS) };
  const apis = [await startApi(ctx.db.url, ctx.prefix, undefined, env), await startApi(ctx.db.url, ctx.prefix, undefined, env)];
  const proxy = await startFaultProxy({
    upstreams: apis.map((a) => a.port),
    decide: sharesDecider(FAULTS, seeded(SEED)),
    delayMs: HELD_ANSWER_MS,
  });
  const tries: Tries = { first: 0, total: 0, noAnswer: 0, byStatus: new Map(), afterFinal402: 0, declined: new Set() };
  if (MUTATION) console.log(`  mutation: ${MUTATION}`);
  if (CHECKOUT) console.log(`  the client of ${CHECKOUT}`);
  const module: ClientModule = CHECKOUT ? ((await import(`${CHECKOUT}/client/index.ts`)) as ClientModule) : await import("charges-outbox/client");
  // The default options: only what locates the API, authenticates, and observes the tries.
  const client = new module.ChargesClient({
    baseUrl: proxy.url,
    token: () => tokenFor(),
    onTry: (t) => countTry(ctx, tries, t),
    ...(MUTATION === "new-key-per-try" ? { fetch: newKeyPerTry } : {}),
  });
  const log = new IntentLog();
  const started = Date.now();
  let restartedAt = 0;
  try {
    const load = runIntents(client, LOAD, log, module.ChargesApiError);
    await waitUntil(() => log.finished >= OUTAGE_AFTER_INTENTS, DEADLINE_MS, `${OUTAGE_AFTER_INTENTS} intents to finish`);
    await outage(sim, proxy);
    await waitUntil(() => log.finished >= KILL_AFTER_INTENTS, 2 * DEADLINE_MS, `${KILL_AFTER_INTENTS} intents to finish`);
    await hardKill(apis[0]!.child);
    apis[0] = await startApi(ctx.db.url, ctx.prefix, apis[0]!.port, env);
    restartedAt = log.finished;
    await load;
  } finally {
    await proxy.close();
  }
  ctx.checks.check(restartedAt < log.finished, "the API was killed and back while intents were still being sent", `${restartedAt} of ${log.finished} finished before`);
  const seconds = (Date.now() - started) / 1000;
  console.log(`  the client's budget: ${JSON.stringify(client.budget.stats)}`);
  return intentInvariants({ ctx, log, load: LOAD, proxy, sim, tries, budgetBound: budgetBound(client, seconds, tries.first), granted: client.budget.stats.granted, seconds });
}

/**
 * The client's own bound on its retries: burst + perSecond · seconds + perSuccess · successes
 * (client/budget.ts). An older checkout's budget was paid by first tries instead (`ratio`).
 */
function budgetBound(client: ChargesClient, seconds: number, firstTries: number): number {
  const options: { burst: number; perSecond: number; perSuccess?: number; ratio?: number } = client.budget.options;
  const stats: { successes?: number } = client.budget.stats;
  return options.burst + options.perSecond * seconds + (options.perSuccess ?? 0) * (stats.successes ?? 0) + (options.ratio ?? 0) * firstTries;
}

/** The processor failing for OUTAGE_MS: each failure for a phase, back to back; then it answers again. */
async function outage(sim: ProcessorSim, proxy: FaultProxy): Promise<void> {
  for (const faults of OUTAGE) {
    sim.setFaults(faults);
    // A fault's duration: the processor is down for this long (a hang until a 504 came of it).
    await sleep(OUTAGE_PHASE_MS);
    if (faults !== HANG) continue;
    const answered504 = () => [...proxy.answersByKey.values()].some((statuses) => statuses.includes(504));
    await waitUntil(answered504, FIRST_504_TIMEOUT_MS, "the API's first 504 while the processor hangs");
  }
  sim.clearFaults();
  await sim.settled();
}

/** Each try of each call: counted, tallied for the summary, and a try after a 402 noticed. */
function countTry(ctx: Ctx, tries: Tries, t: TryReport): void {
  ctx.tally.answers.push({ key: t.idempotencyKey ?? "", amountCents: 0, status: t.status, replayed: t.replayed, body: "", at: Date.now() });
  tries.total += 1;
  if (t.attempt === 1) tries.first += 1;
  if (t.outcome !== "answer") tries.noAnswer += 1;
  tries.byStatus.set(t.status, (tries.byStatus.get(t.status) ?? 0) + 1);
  const key = t.idempotencyKey ?? "";
  if (tries.declined.has(key)) tries.afterFinal402 += 1;
  if (t.status === 402) tries.declined.add(key);
}
