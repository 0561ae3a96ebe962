// The client's retries proven the way faults arrive: a real api.ts process behind the fault
// proxy (raw TCP). An answer lost after the server committed, a connection reset halfway
// through the request, an answer held past the per-try timeout: each ends as one charge,
// and the client says how many tries it took and whether the final answer was a replay.
import { afterAll, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import { ChargesApiError, ChargesClient, CLIENT_PROBLEM, type TryReport } from "charges-outbox/client";
import { counts } from "../testkit/api.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { startFaultProxy, type Fate } from "../testkit/http-fault-proxy.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";
import { freshDatabase } from "../testkit/services.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("client_proxy");
const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, LOG_LEVEL: "warn", ...authEnv() } });
// The fates of the next requests, in order; "pass" once the script runs out.
let script: Fate[] = [];
// The Retry-After of the proxy's own 503s and 429s: an HTTP date, `retryAfterMs` from now, or
// delay-seconds when `retryAfterSeconds` is set.
let retryAfterMs = 0;
let retryAfterSeconds: number | undefined;
const retryAfter = (): string => (retryAfterSeconds !== undefined ? String(retryAfterSeconds) : new Date(Date.now() + retryAfterMs).toUTCString());
// The Should-Retry header of the proxy's own answers; none unless a test sets it.
let hint: string | undefined;
const proxy = await startFaultProxy({ upstreams: [api.port], decide: () => script.shift() ?? "pass", delayMs: 6_000, retryAfter, shouldRetry: () => hint });

afterAll(async () => {
  await proxy.close();
  await api.child.stop();
  await db.drop();
});
beforeEach(async () => {
  hint = undefined;
  retryAfterSeconds = undefined;
  await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
});

function client(options: Partial<ConstructorParameters<typeof ChargesClient>[0]> = {}): ChargesClient {
  // Short waits: the test is about which tries happen, not how long they wait. A try times
  // out only when the proxy holds its answer (6 s), never on a loaded machine.
  return new ChargesClient({ baseUrl: proxy.url, token: () => tokenFor(), perTryTimeoutMs: 3_000, backoff: { baseMs: 20, maxMs: 100 }, ...options });
}

async function created(fates: Fate[]): Promise<{ replayed: boolean; attempts: number; tries: TryReport[] }> {
  script = [...fates];
  const tries: TryReport[] = [];
  const answer = await client().charges.create({ amountCents: 4900 }, { onTry: (t) => tries.push(t) });
  return { replayed: answer.replayed, attempts: answer.attempts, tries };
}

test("the answer is lost after the commit: the retry is the replay, one charge", async () => {
  const { replayed, attempts, tries } = await created(["drop"]);
  expect({ replayed, attempts }).toEqual({ replayed: true, attempts: 2 });
  expect(tries.map((t) => [t.outcome, t.status])).toEqual([["network", 0], ["answer", 201]]);
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
});

test("the connection is reset mid-request: nothing was written, the retry creates the one charge", async () => {
  const { replayed, attempts } = await created(["reset", "reset"]);
  expect({ replayed, attempts }).toEqual({ replayed: false, attempts: 3 });
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
});

test("the answer comes after the per-try timeout: the retry is the replay, one charge", async () => {
  const { replayed, attempts, tries } = await created(["delay"]);
  expect({ replayed, attempts }).toEqual({ replayed: true, attempts: 2 });
  expect(tries[0]?.outcome).toBe("timeout");
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
});

test("every try of one call carries one key and one body", async () => {
  const before = new Map([...proxy.bodiesByKey].map(([k, v]) => [k, v.size]));
  const { charge } = await client().charges.create({ amountCents: 5000 });
  script = ["drop", "reset", "delay", "drop"];
  const answer = await client().refunds.create(charge.id, { amountCents: 1000 });
  expect(answer.attempts).toBe(5);
  expect(before.has(answer.idempotencyKey)).toBe(false);
  expect(proxy.bodiesByKey.get(answer.idempotencyKey)?.size).toBe(1);
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 2, keys: 2 });
});

test("no token for the retry: it waits for one until the deadline, then the call ends retryable, and the key's one charge stands", async () => {
  script = Array<Fate>(20).fill("drop");
  const c = client({ retryBudget: { burst: 2, perSecond: 0, perSuccess: 1 } });
  const error = await c.charges.create({ amountCents: 700 }, { deadlineMs: 2_000 }).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(ChargesApiError);
  const { type, attempts, retryable, status, idempotencyKey } = error as ChargesApiError;
  expect({ type, attempts, retryable, status }).toEqual({ type: CLIENT_PROBLEM.deadline, attempts: 3, retryable: true, status: 0 });
  expect(c.budget.stats).toMatchObject({ granted: 2, refused: 1, successes: 0 });
  expect(proxy.fatesByKey.get(idempotencyKey!)).toEqual(["drop", "drop", "drop"]);
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
});

test("a retry waiting for a token gets the one another call's success pays", async () => {
  script = ["drop"];
  const c = client({ retryBudget: { burst: 0, perSecond: 0, perSuccess: 1 } });
  const tries: TryReport[] = [];
  const waiting = c.charges.create({ amountCents: 710 }, { onTry: (t) => tries.push(t) });
  // The first call's retry waits (its first try's answer was dropped); the second call's success pays for it.
  await waitUntil(() => c.budget.stats.waiting === 1, 10_000, "the first call's retry to wait for a token");
  const other = await c.charges.create({ amountCents: 720 });
  expect(other.attempts).toBe(1);
  expect(await waiting).toMatchObject({ replayed: true, attempts: 2 });
  expect(tries.map((t) => [t.outcome, t.status])).toEqual([["network", 0], ["answer", 201]]);
  expect(c.budget.stats).toMatchObject({ granted: 1, refused: 0, successes: 2 });
  expect(await counts(db.sql)).toEqual({ charges: 2, outbox: 2, keys: 2 });
});

test("a 500 after the server committed is an unknown outcome: tried again with the same key, the replay", async () => {
  const { replayed, attempts, tries } = await created(["fail"]);
  expect({ replayed, attempts }).toEqual({ replayed: true, attempts: 2 });
  expect(tries.map((t) => t.status)).toEqual([500, 201]);
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
});

test("Should-Retry: false on a 503 ends the call at once, not retryable; nothing was sent upstream", async () => {
  hint = "false";
  retryAfterMs = 0;
  script = ["unavailable"];
  const error = (await client().charges.create({ amountCents: 730 }).catch((e: unknown) => e)) as ChargesApiError;
  const { status, attempts, retryable } = error;
  expect({ status, attempts, retryable }).toEqual({ status: 503, attempts: 1, retryable: false });
  expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
});

test("the deadline comes first: the call stops, retryable; a later call with the key gets the charge", async () => {
  script = Array<Fate>(1000).fill("drop");
  const c = client({ retryBudget: { burst: 1000, perSecond: 0, perSuccess: 0 } });
  const error = (await c.charges.create({ amountCents: 800 }, { deadlineMs: 2_500 }).catch((e: unknown) => e)) as ChargesApiError;
  expect({ type: error.type, retryable: error.retryable }).toEqual({ type: CLIENT_PROBLEM.deadline, retryable: true });
  expect(error.attempts).toBeGreaterThan(1);
  script = [];
  const later = await c.charges.create({ amountCents: 800 }, { idempotencyKey: error.idempotencyKey });
  expect(later).toMatchObject({ replayed: true, attempts: 1 });
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
});

test("a 503 from in front of the API is tried again; nothing reached the API, so the retry creates the charge", async () => {
  retryAfterMs = 0;
  const { replayed, attempts, tries } = await created(["unavailable", "unavailable"]);
  expect({ replayed, attempts }).toEqual({ replayed: false, attempts: 3 });
  expect(tries.map((t) => t.status)).toEqual([503, 503, 201]);
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
});

test("a Retry-After (an HTTP date) past the deadline: no second try, the 503 problem, retryable", async () => {
  retryAfterMs = 60_000;
  script = ["unavailable"];
  const error = (await client().charges.create({ amountCents: 900 }, { deadlineMs: 10_000 }).catch((e: unknown) => e)) as ChargesApiError;
  const { type, status, attempts, retryable } = error;
  expect({ type, status, attempts, retryable }).toEqual({ type: "about:blank", status: 503, attempts: 1, retryable: true });
  expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
});

test("a 429 with Retry-After: 1 is tried again no sooner than a second later, into the charge", async () => {
  retryAfterSeconds = 1;
  const at: number[] = [];
  script = ["limited"];
  const tries: TryReport[] = [];
  const answer = await client().charges.create({ amountCents: 740 }, { onTry: (t) => (tries.push(t), at.push(performance.now())) });
  expect({ replayed: answer.replayed, attempts: answer.attempts }).toEqual({ replayed: false, attempts: 2 });
  expect(tries.map((t) => t.status)).toEqual([429, 201]);
  // The second try's answer came at least the asked second after the first's (the wait is a lower bound).
  expect(at[1]! - at[0]!).toBeGreaterThanOrEqual(1000);
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
});
