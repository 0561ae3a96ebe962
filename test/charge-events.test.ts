// GET /charges/:id/events against what a subscriber received: a charge and two refunds through
// the API, published by a real relay to the real broker under a private prefix; the route's
// envelopes must be the broker's payloads byte for byte, in sequence order, and only for the
// charge's own tenant. Then its bad input, a row not yet published, the pages of a long
// charge, and its place in /openapi.json.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { createSql } from "../lib/platform/db.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay, laneCount } from "../lib/relay/loop.ts";
import { EVENTS_PAGE_SIZE } from "../lib/api/events-read.ts";
import { newEventId } from "../lib/platform/uuid.ts";
import { startTestApi } from "../testkit/api.ts";
import { authHeaders, tokenFor, TEST_TENANT } from "../testkit/auth.ts";
import { ChargesClient } from "../client/index.ts";
import { collect, type Received } from "../testkit/mqtt.ts";
import { countWhere } from "../testkit/outbox.ts";
import { newCharge, postRefund, refundBody } from "../testkit/refunds.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { chargeWith, startProcessorApi } from "../testkit/processor.ts";
import { startProcessorSim } from "../testkit/processor-sim.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("charge_events");
const { mqttUrl } = await services();
const api = await startTestApi(db.url);
const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  await api.close();
  await db.drop();
});

async function getEvents(id: string, query = "", tenant: string = TEST_TENANT): Promise<Response> {
  return api.fetch(new Request(`http://localhost/charges/${id}/events${query}`, { headers: await authHeaders(tenant) }));
}

const payloadOf = (message: Received): string => Buffer.from(message.packet.payload).toString("utf8");
const client = new ChargesClient({ baseUrl: "http://localhost", token: () => tokenFor(TEST_TENANT), fetch: (url, init) => api.fetch(new Request(url, init)) });

/** A relay in this process publishing under `prefix` until the test's cleanups stop it. */
async function startRelay(prefix: string): Promise<void> {
  const sql = createSql(db.url, { max: laneCount(50) + 1, applicationName: "relay-test" });
  cleanups.push(() => sql.end({ timeout: 5 }));
  const broker = connectBroker(mqttUrl);
  cleanups.push(() => broker.close());
  await waitUntil(() => broker.connected, 5000, "broker connection");
  const relay = createRelay({ sql, broker, batchSize: 50, pollMs: 100, topicPrefix: prefix });
  cleanups.push(() => relay.stop());
  void relay.run();
}

const prefix = `test/${crypto.randomUUID()}/`;
const collector = await collect(mqttUrl, prefix);
cleanups.push(() => collector.close());
await startRelay(prefix);
const chargeId = await newCharge(api, 1000);
for (const amountCents of [300, 450]) {
  expect((await postRefund(api, chargeId, refundBody(amountCents), { key: crypto.randomUUID() })).status).toBe(201);
}
// Another tenant's charge, published too: never in the first tenant's answers.
const otherCharge = await newCharge(api, 700, "tenant-b");
await collector.waitFor(4);
await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 10_000, "every row marked published");
const received = collector.messages.filter((m) => m.envelope?.aggregateId === chargeId).sort((a, b) => a.envelope!.sequence! - b.envelope!.sequence!);

test("the charge's events are the broker's payloads byte for byte, in sequence order", async () => {
  expect(received.map((m) => m.envelope?.sequence)).toEqual([1, 2, 3]);
  const res = await getEvents(chargeId);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe("application/json;charset=utf-8");
  expect(res.headers.get("link")).toBeNull();
  expect(await res.text()).toBe(`{"events":[${received.map(payloadOf).join(",")}]}`);
});

test("?after= answers the events after that sequence, the same bytes; past the last, none", async () => {
  expect(await (await getEvents(chargeId, "?after=1")).text()).toBe(`{"events":[${received.slice(1).map(payloadOf).join(",")}]}`);
  expect(await (await getEvents(chargeId, "?after=0")).text()).toBe(`{"events":[${received.map(payloadOf).join(",")}]}`);
  const past = await getEvents(chargeId, "?after=3");
  expect(past.status).toBe(200);
  expect(await past.text()).toBe(`{"events":[]}`);
});

test("tenant-scoped: another tenant's charge answers as an unknown one, 404 not-found", async () => {
  const other = await getEvents(otherCharge);
  const unknown = await getEvents(crypto.randomUUID());
  for (const res of [other, unknown]) {
    expect(res.status).toBe(404);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(((await res.json()) as { type: string }).type).toEndWith("/not-found");
  }
  // Its own tenant reads it.
  const own = await getEvents(otherCharge, "", "tenant-b");
  const published = collector.messages.find((m) => m.envelope?.aggregateId === otherCharge)!;
  expect(await own.text()).toBe(`{"events":[${payloadOf(published)}]}`);
});

test("bad input is a clear problem: an id that is not a UUID, an `after` that is not a sequence, no token", async () => {
  const badId = await getEvents("not-a-uuid");
  expect(badId.status).toBe(400);
  expect(((await badId.json()) as { type: string }).type).toEndWith("/invalid-id");
  for (const after of ["-1", "abc", "1.5", "", "2147483648", "99999999999", "1e3"]) {
    const res = await getEvents(chargeId, `?after=${after}`);
    expect(res.status).toBe(400);
    const body = (await res.json()) as { type: string; detail: string };
    expect(body.type).toEndWith("/invalid-query");
    expect(body.detail).toContain("after");
  }
  const anonymous = await api.fetch(new Request(`http://localhost/charges/${chargeId}/events`));
  expect(anonymous.status).toBe(401);
});

test("an event the relay has not published yet is not answered: the broker has not carried it", async () => {
  const sql = db.sql;
  const id = newEventId();
  await sql`
    insert into outbox (id, tenant, aggregate_type, aggregate_id, sequence, event_type, payload)
    values (${id}, ${TEST_TENANT}, 'charge', ${chargeId}, 99, 'ChargeRefunded', '{}')`;
  // The relay runs, but a row behind a gap is no head: it stays unpublished.
  try {
    expect(await (await getEvents(chargeId, "?after=2")).text()).toBe(`{"events":[${payloadOf(received[2]!)}]}`);
  } finally {
    await sql`delete from outbox where id = ${id}`;
  }
});

test(`a long charge comes in pages of ${EVENTS_PAGE_SIZE}, each naming the next in a Link`, async () => {
  // A charge with many published events, written as the relay leaves them (published_at set).
  const long = await newCharge(api, 100_000);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 10_000, "the charge's event published");
  await db.sql`
    insert into outbox (id, tenant, aggregate_type, aggregate_id, sequence, event_type, payload, published_at)
    select gen_random_uuid(), ${TEST_TENANT}, 'charge', ${long}, s, 'ChargeRefunded',
           json_build_object('chargeId', ${long}::text, 'refundId', gen_random_uuid()::text, 'amountCents', 1, 'refundedCents', s - 1)::text, now()
      from generate_series(2, ${EVENTS_PAGE_SIZE + 2}) as s`;
  const first = await getEvents(long);
  expect(first.headers.get("link")).toBe(`</charges/${long}/events?after=${EVENTS_PAGE_SIZE}>; rel="next"`);
  const page1 = ((await first.json()) as { events: { sequence: number }[] }).events.map((e) => e.sequence);
  expect(page1).toEqual(Array.from({ length: EVENTS_PAGE_SIZE }, (_, i) => i + 1));
  const second = await getEvents(long, `?after=${EVENTS_PAGE_SIZE}`);
  expect(second.headers.get("link")).toBeNull();
  const page2 = ((await second.json()) as { events: { sequence: number }[] }).events.map((e) => e.sequence);
  expect(page2).toEqual([EVENTS_PAGE_SIZE + 1, EVENTS_PAGE_SIZE + 2]);
  // The client follows the pages.
  const all = await client.charges.events(long);
  expect(all.map((e) => e.sequence)).toEqual(Array.from({ length: EVENTS_PAGE_SIZE + 2 }, (_, i) => i + 1));
  expect((await client.charges.events(long, { after: EVENTS_PAGE_SIZE + 1 })).map((e) => e.sequence)).toEqual([EVENTS_PAGE_SIZE + 2]);
});

test("client.charges.events: the envelopes the broker carried; an unknown charge throws the API's 404", async () => {
  expect(await client.charges.events(chargeId)).toEqual(received.map((m) => JSON.parse(payloadOf(m)) as unknown) as never);
  expect((await client.charges.events(chargeId, { after: 2 })).map((e) => e.id)).toEqual([received[2]!.envelope!.id]);
  const error = await client.charges.events(crypto.randomUUID()).catch((e: unknown) => e);
  expect((error as { status?: number }).status).toBe(404);
});

test("PAYMENT_PROCESSOR=stripe: a charge through the processor, its refund, and a declined charge's ChargeFailed, the broker's bytes alike", async () => {
  const sim = await startProcessorSim();
  cleanups.push(() => sim.stop());
  const stripe = await startProcessorApi(db.url, sim);
  cleanups.push(() => stripe.close());
  const post = async (path: string, body: string): Promise<Response> =>
    stripe.fetch(new Request(`http://localhost${path}`, { method: "POST", body, headers: { "content-type": "application/json", "idempotency-key": crypto.randomUUID(), ...(await authHeaders()) } }));
  const paid = await post("/charges", chargeWith(2500, "pm_card_visa"));
  expect(paid.status).toBe(201);
  const paidId = ((await paid.json()) as { id: string }).id;
  expect((await post(`/charges/${paidId}/refunds`, refundBody(500))).status).toBe(201);
  const declined = await post("/charges", chargeWith(1200, "pm_card_chargeDeclined"));
  expect(declined.status).toBe(402);
  const [failed] = await db.sql<{ id: string }[]>`select id::text from charges where status = 'failed' and amount_cents = 1200`;
  await collector.waitForMessage((m) => m.envelope?.aggregateId === failed!.id, 10_000, "the ChargeFailed");
  await collector.waitForMessage((m) => m.envelope?.aggregateId === paidId && m.envelope.sequence === 2, 10_000, "the ChargeRefunded");
  const carried = (id: string) => collector.messages.filter((m) => m.envelope?.aggregateId === id).sort((a, b) => a.envelope!.sequence! - b.envelope!.sequence!).map(payloadOf);
  const get = async (id: string) => (await stripe.fetch(new Request(`http://localhost/charges/${id}/events`, { headers: await authHeaders() }))).text();
  expect(await get(paidId)).toBe(`{"events":[${carried(paidId).join(",")}]}`);
  expect(carried(paidId).map((p) => (JSON.parse(p) as { type: string }).type)).toEqual(["ChargeCreated", "ChargeRefunded"]);
  expect(await get(failed!.id)).toBe(`{"events":[${carried(failed!.id).join(",")}]}`);
  expect((JSON.parse(carried(failed!.id)[0]!) as { type: string }).type).toBe("ChargeFailed");
});

test("bounded as GET /charges/:id: the outbox locked (a migration's ALTER), the read answers 503 within the API's bounds while the lock is still held", async () => {
  const bounded = await startTestApi(db.url, { API_LOCK_TIMEOUT_MS: "200" });
  cleanups.push(() => bounded.close());
  const tx = await db.sql.reserve();
  await tx`begin`;
  await tx`lock table outbox in access exclusive mode`;
  try {
    const res = await bounded.fetch(new Request(`http://localhost/charges/${chargeId}/events`, { headers: await authHeaders() }));
    // Answered while the lock is still ours: the bound, not its release, ended the wait.
    const [held] = await tx<{ n: number }[]>`select count(*)::int as n from pg_locks where pid = pg_backend_pid() and relation = 'outbox'::regclass and mode = 'AccessExclusiveLock' and granted`;
    expect(held?.n).toBe(1);
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(((await res.json()) as { detail: string }).detail).toContain("time bounds");
  } finally {
    await tx`rollback`;
    tx.release();
  }
});

test("in /openapi.json: the route, its `after` query parameter, its answers and the envelopes' schema", async () => {
  const doc = (await (await api.fetch(new Request("http://localhost/openapi.json"))).json()) as {
    paths: Record<string, Record<string, { operationId: string; parameters?: { name: string; in: string }[]; responses: Record<string, unknown> }>>;
    components: { schemas: Record<string, { properties?: Record<string, unknown> }> };
  };
  const op = doc.paths["/charges/{id}/events"]?.get;
  expect(op?.operationId).toBe("getChargeEvents");
  expect(op?.parameters?.map((p) => `${p.in}:${p.name}`).sort()).toEqual(["path:id", "query:after"]);
  expect(Object.keys(op?.responses ?? {}).sort()).toEqual(["200", "400", "401", "404", "429", "431", "503"]);
  expect(Object.keys(doc.components.schemas.ChargeEvents?.properties ?? {})).toEqual(["events"]);
});
