// Scenario 14: answers lost. The project's client (charges-outbox/client) sends 2,000 intents
// (1,000 charges, each then refunded in part), 50 at a time, through a fault proxy on raw TCP
// (testkit/http-fault-proxy.ts) in front of two `bun api.ts` processes. The proxy forwards
// every request, then drops a share of the answers after the server has answered (closing
// the connection), resets some connections halfway through the request, and holds others
// past the client's per-try timeout; one API process is SIGKILLed mid-load and started again.
// Proves the client's side of the guarantee: one charge or refund per intent, each intent's
// final answer is the one stored under its key, one body per key, retries within the budget.
// CHAOS_CLIENT_MUTATION=new-key-per-try makes the client send a new key on every try (red).
// Ledger mode (PAYMENT_PROCESSOR=none). Processor faults (declines, a processor failing for a
// while) go in API_ENV and FAULTS once the processor mode is merged: the invariants hold
// as they are, a decline being a final 402 stored under its key like a 201.
import { ChargesClient, type RetryBudgetOptions, type TryReport } from "charges-outbox/client";
import { tokenFor } from "../testkit/auth.ts";
import { seeded, sharesDecider, startFaultProxy, type FaultProxy } from "../testkit/http-fault-proxy.ts";
import { waitUntil } from "../testkit/wait.ts";
import { hardKill, startApi } from "./lib/harness.ts";
import { IntentLog, newKeyPerTry, runIntents, type IntentLoad } from "./lib/intents.ts";
import { scenario, type Ctx } from "./lib/report.ts";

const LOAD: IntentLoad = { charges: 1000, concurrency: 50, deadlineMs: 30_000 };
// Shares of the requests: answer dropped after the server answered, reset mid-request, held
// past the per-try timeout, a 503 from the proxy itself (Retry-After: 1). Seeded, so a run's
// faults can be replayed (CHAOS_SEED).
const FAULTS = { drop: 0.08, reset: 0.04, delay: 0.03, unavailable: 0.02 } as const;
const SEED = Number(process.env.CHAOS_SEED ?? 14);
// A try with no answer after this is abandoned; the proxy's held answers come after it.
const PER_TRY_TIMEOUT_MS = 1_500;
const HELD_ANSWER_MS = 2_500;
// The client's retry budget: enough for a fault rate of ~15 % plus the kill, not unbounded.
const BUDGET: RetryBudgetOptions = { burst: 100, perSecond: 10, ratio: 0.5 };
// The kill comes once this many intents have finished: the load is in full flight.
const KILL_AFTER_INTENTS = 500;
const MUTATION = process.env.CHAOS_CLIENT_MUTATION;
// Two APIs and their restart on a shared server (max_connections 100 by default): 8
// connections each instead of 32 leave room for the rest; the load is 50 intents at a time.
// Processor mode's variables (PAYMENT_PROCESSOR, its simulator's URL) go here once it lands.
const API_ENV = { API_POOL_SIZE: "8" };

interface Tries {
  first: number;
  total: number;
  noAnswer: number;
}

await scenario("14", "answers lost between the client and two APIs", async (ctx) => {
  const apis = [await startApi(ctx.db.url, ctx.prefix, undefined, API_ENV), await startApi(ctx.db.url, ctx.prefix, undefined, API_ENV)];
  const proxy = await startFaultProxy({
    upstreams: apis.map((a) => a.port),
    decide: sharesDecider(FAULTS, seeded(SEED)),
    delayMs: HELD_ANSWER_MS,
  });
  const tries: Tries = { first: 0, total: 0, noAnswer: 0 };
  const onTry = (t: TryReport): void => {
    ctx.tally.answers.push({ key: t.idempotencyKey ?? "", amountCents: 0, status: t.status, replayed: t.replayed, body: "", at: Date.now() });
    tries.total += 1;
    if (t.attempt === 1) tries.first += 1;
    if (t.outcome !== "answer") tries.noAnswer += 1;
  };
  if (MUTATION) console.log(`  mutation: ${MUTATION}`);
  const client = new ChargesClient({
    baseUrl: proxy.url,
    token: () => tokenFor(),
    perTryTimeoutMs: PER_TRY_TIMEOUT_MS,
    backoff: { baseMs: 50, maxMs: 1_000 },
    retryBudget: BUDGET,
    onTry,
    ...(MUTATION === "new-key-per-try" ? { fetch: newKeyPerTry } : {}),
  });
  const log = new IntentLog();
  const started = Date.now();
  try {
    const load = runIntents(client, LOAD, log);
    await waitUntil(() => log.finished >= KILL_AFTER_INTENTS, 60_000, `${KILL_AFTER_INTENTS} intents to finish`);
    await hardKill(apis[0]!.child);
    apis[0] = await startApi(ctx.db.url, ctx.prefix, apis[0]!.port, API_ENV);
    const restartedAt = log.finished;
    await load;
    ctx.checks.check(restartedAt < 2 * LOAD.charges, "the API was killed and back while intents were still being sent", `${restartedAt} finished before`);
  } finally {
    await proxy.close();
  }
  return invariants(ctx, log, proxy, tries, client.budget.stats, (Date.now() - started) / 1000);
});

async function invariants(ctx: Ctx, log: IntentLog, proxy: FaultProxy, tries: Tries, budget: { granted: number }, seconds: number) {
  const { checks, sql } = ctx;
  const failures = log.failures();
  checks.check(failures.length === 0, `every intent (${2 * LOAD.charges}) ended with its charge or refund, within its deadline`,
    `${failures.length} failed, e.g. ${failures.slice(0, 2).map((f) => f.failure).join(" | ")}`);
  const [rows] = await sql<{ charges: number; refunds: number; keys: number }[]>`
    select (select count(*)::int from charges) as charges, (select count(*)::int from refunds) as refunds,
           (select count(*)::int from idempotency_keys) as keys`;
  checks.check(rows?.charges === LOAD.charges && rows.refunds === LOAD.charges,
    "exactly one charge and one refund per intent", `${rows?.charges} charges, ${rows?.refunds} refunds for ${LOAD.charges} of each`);
  const stored = await sql<{ key: string; body: string }[]>`select key, response_body as body from idempotency_keys where status = 'COMPLETED'`;
  const byKey = new Map(stored.map((r) => [r.key, r.body]));
  const differ = log.intents.filter((i) => i.value !== undefined && !sameJson(byKey.get(i.idempotencyKey ?? ""), i.value));
  checks.check(differ.length === 0, "each intent's final answer is what the API stored under its key",
    `${differ.length} differ or have no stored answer under the client's key`);
  const twoBodies = [...proxy.bodiesByKey.values()].filter((bodies) => bodies.size > 1).length;
  checks.check(twoBodies === 0 && proxy.bodiesByKey.size > 0, "no key was ever sent with two bodies (seen at the proxy)", `${twoBodies} keys with two`);
  const retries = tries.total - tries.first;
  const bound = BUDGET.burst + BUDGET.perSecond * seconds + BUDGET.ratio * tries.first;
  checks.check(retries === budget.granted && retries <= bound, "the retries stayed within the client's budget",
    `${retries} retries, ${budget.granted} granted, bound ${Math.floor(bound)}`);
  checks.check(proxy.counts.requests === tries.total, "the proxy saw exactly the client's tries (no hidden resend)",
    `${proxy.counts.requests} requests at the proxy, ${tries.total} tries`);
  const replays = log.intents.filter((i) => i.replayed).length;
  const c = proxy.counts;
  checks.check(c.drop > 0 && c.reset > 0 && c.delay > 0 && c.unavailable > 0 && replays > 0,
    "faults happened: answers dropped, resets, held answers, 503s, and replays came back",
    `drop ${c.drop}, reset ${c.reset}, delay ${c.delay}, 503 ${c.unavailable}, replays ${replays}`);
  console.log(`  intents ${log.finished}, tries ${tries.total} (${retries} retries, ${tries.noAnswer} without an answer), ` +
    `replays ${replays}; proxy: ${c.requests} requests, ${c.drop} dropped, ${c.reset} reset, ${c.delay} held, ${c.unavailable} 503s, ` +
    `${c.unrouted} unrouted, ${c.cut} cut by the kill; ${seconds.toFixed(1)} s`);
  // Lost here: intents that did not end with their charge or refund (delivery is scenarios 1-12's).
  const [outbox] = await sql<{ n: number }[]>`select count(*)::int as n from outbox`;
  return { charges: rows?.charges ?? 0, outbox: outbox?.n ?? 0, unpublished: 0, lost: 2 * LOAD.charges - (log.finished - failures.length) };
}

function sameJson(stored: string | undefined, answered: Readonly<Record<string, unknown>>): boolean {
  if (stored === undefined) return false;
  return JSON.stringify(JSON.parse(stored)) === JSON.stringify(answered);
}
