// The client against the real API in-process (its fetch handler, real Postgres): typed
// answers, replays, the never-retried statuses, a 409 in flight retried into the replay, and
// intents resumed from a key store.
import { expect, setDefaultTimeout, test } from "bun:test";
import { ChargesApiError, ChargesClient, CLIENT_PROBLEM, MemoryKeyStore, type ChargeBody, type TryReport } from "charges-outbox/client";
import { apiTestContext, counts, postCharge, waitForApiBlockedOnLock } from "../testkit/api.ts";
import { tokenFor } from "../testkit/auth.ts";
import { holdKey } from "../testkit/database.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("client");
const inProcess = (url: string, init: RequestInit): Promise<Response> => api.fetch(new Request(url, init));

function client(options: Partial<ConstructorParameters<typeof ChargesClient>[0]> = {}): ChargesClient {
  return new ChargesClient({ baseUrl: "http://localhost", token: () => tokenFor(), fetch: inProcess, ...options });
}

/** The ChargesApiError `promise` rejects with, as a plain object of its fields. */
async function failure(promise: Promise<unknown>): Promise<Pick<ChargesApiError, "type" | "status" | "detail" | "retryable" | "attempts" | "idempotencyKey">> {
  const error = await promise.then(() => undefined, (e: unknown) => e);
  if (!(error instanceof ChargesApiError)) throw new Error(`expected a ChargesApiError, got ${String(error)}`);
  const { type, status, detail, retryable, attempts, idempotencyKey } = error;
  return { type, status, detail, retryable, attempts, idempotencyKey };
}

test("create, the same key again (a replay), get, and a refund: typed answers with the key and the tries", async () => {
  const c = client();
  const created = await c.charges.create({ amountCents: 4900 });
  expect(created).toMatchObject({ replayed: false, attempts: 1, charge: { amountCents: 4900 } });
  const again = await c.charges.create({ amountCents: 4900 }, { idempotencyKey: created.idempotencyKey });
  expect(again).toMatchObject({ replayed: true, attempts: 1, charge: created.charge });
  expect(await c.charges.get(created.charge.id)).toMatchObject({ id: created.charge.id, refundedCents: 0 });
  const refunded = await c.refunds.create(created.charge.id, { amountCents: 900 });
  expect(refunded).toMatchObject({ replayed: false, attempts: 1, refund: { chargeId: created.charge.id, amountCents: 900 } });
  expect(await c.charges.get(created.charge.id)).toMatchObject({ refundedCents: 900 });
  const [stored] = await db.sql<{ key: string }[]>`select key from idempotency_keys where endpoint = 'POST /charges'`;
  expect(stored?.key).toBe(created.idempotencyKey);
});

test("never retried: 400, 401, 404, 422 are one try each, with the problem and retryable false", async () => {
  const tries: TryReport[] = [];
  const c = client({ onTry: (t) => tries.push(t) });
  const invalid = await failure(c.charges.create({ amountCents: 0 }));
  expect(invalid).toMatchObject({ status: 400, retryable: false, attempts: 1, type: "https://charges.example/problems/invalid-body" });
  const unauthorized = await failure(client({ token: "not-a-jwt", onTry: (t) => tries.push(t) }).charges.create({ amountCents: 1 }));
  expect(unauthorized).toMatchObject({ status: 401, retryable: false, attempts: 1 });
  expect((await failure(c.charges.get(crypto.randomUUID()))).status).toBe(404);
  const first = await c.charges.create({ amountCents: 100 });
  const reused = await failure(c.charges.create({ amountCents: 200 }, { idempotencyKey: first.idempotencyKey }));
  expect(reused).toMatchObject({ status: 422, retryable: false, idempotencyKey: first.idempotencyKey });
  expect(tries.map((t) => t.attempt)).toEqual([1, 1, 1, 1, 1]);
  expect(await counts(db.sql)).toMatchObject({ charges: 1 });
});

test("a 409 while the first request is in flight is retried after Retry-After and ends as the replay", async () => {
  const key = crypto.randomUUID();
  const hold = await holdKey(db.sql, key);
  const first = postCharge(api, '{"amountCents":4900}', { key });
  await waitForApiBlockedOnLock(db.sql);
  const tries: TryReport[] = [];
  const onTry = (t: TryReport): void => {
    tries.push(t);
    if (t.status === 409) void hold.release();
  };
  const answer = await client().charges.create({ amountCents: 4900 }, { idempotencyKey: key, onTry });
  expect((await first).status).toBe(201);
  // One 409 or more (the held request may take a moment to commit once released), then the replay.
  const statuses = tries.map((t) => t.status);
  expect(statuses.at(-1)).toBe(201);
  expect(statuses.slice(0, -1).length).toBeGreaterThan(0);
  expect(statuses.slice(0, -1).every((s) => s === 409)).toBe(true);
  expect(answer).toMatchObject({ replayed: true, attempts: tries.length, idempotencyKey: key });
  expect(await counts(db.sql)).toMatchObject({ charges: 1, keys: 1 });
});

test("a key store: the same intent is one key (a replay, not a second charge); another body is refused locally", async () => {
  const store = new MemoryKeyStore();
  const body: ChargeBody = { amountCents: 2500 };
  const before = await client({ keyStore: store }).charges.create(body, { intentId: "order-42" });
  // A new client (a restarted process) with the same store.
  const after = await client({ keyStore: store }).charges.create(body, { intentId: "order-42" });
  expect(after).toMatchObject({ replayed: true, idempotencyKey: before.idempotencyKey, charge: before.charge });
  const conflict = await failure(client({ keyStore: store }).charges.create({ amountCents: 2600 }, { intentId: "order-42" }));
  expect(conflict).toMatchObject({ type: CLIENT_PROBLEM.intentConflict, status: 0, attempts: 0, retryable: false });
  expect(await counts(db.sql)).toMatchObject({ charges: 1 });
  await expect(client().charges.create(body, { intentId: "order-43" })).rejects.toThrow(TypeError);
});

test("an aborted signal sends nothing; the key comes back for a later try", async () => {
  const controller = new AbortController();
  controller.abort();
  const aborted = await failure(client().charges.create({ amountCents: 1 }, { signal: controller.signal, idempotencyKey: "order-7" }));
  expect(aborted).toMatchObject({ type: CLIENT_PROBLEM.aborted, attempts: 0, retryable: true, idempotencyKey: "order-7" });
  expect(await counts(db.sql)).toMatchObject({ charges: 0 });
});

test("charges.capture: authorize with capture manual, capture part of it; the same key replays; a second capture is a 422 charge-not-capturable, not retried", async () => {
  const c = client();
  const { charge } = await c.charges.create({ amountCents: 5000, capture: "manual" });
  expect(charge.status).toBe("authorized");
  const captured = await c.charges.capture(charge.id, { amountCents: 3500 });
  expect(captured).toMatchObject({ replayed: false, attempts: 1, charge: { id: charge.id, status: "succeeded", capturedCents: 3500 } });
  const again = await c.charges.capture(charge.id, { amountCents: 3500 }, { idempotencyKey: captured.idempotencyKey });
  expect(again).toMatchObject({ replayed: true, charge: captured.charge });
  const refused = await failure(c.charges.capture(charge.id));
  expect(refused).toMatchObject({ type: "https://charges.example/problems/charge-not-capturable", status: 422, retryable: false, attempts: 1 });
});

test("charges.cancel: an authorized charge canceled; the same key replays; a second cancel is a 422 charge-not-cancelable, not retried", async () => {
  const c = client();
  const { charge } = await c.charges.create({ amountCents: 2000, capture: "manual" });
  const canceled = await c.charges.cancel(charge.id);
  expect(canceled).toMatchObject({ replayed: false, attempts: 1, charge: { id: charge.id, status: "canceled" } });
  expect(await c.charges.cancel(charge.id, { idempotencyKey: canceled.idempotencyKey })).toMatchObject({ replayed: true, charge: canceled.charge });
  expect(await failure(c.charges.cancel(charge.id))).toMatchObject({ type: "https://charges.example/problems/charge-not-cancelable", status: 422, retryable: false, attempts: 1 });
});
