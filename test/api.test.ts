// POST /charges against real Postgres: every row of the table in docs/api.md ("Answers"), asserting rows as well
// as responses.
import { setDefaultTimeout } from "bun:test";
import { describe, expect, test } from "bun:test";
import { apiTestContext, counts, getCharge, postCharge, startTestApi } from "../testkit/api.ts";
import { authHeaders, TEST_TENANT } from "../testkit/auth.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("api");

const key = () => crypto.randomUUID();
const body = (amount: unknown = 4900) => JSON.stringify({ amountCents: amount });

describe("a retried POST never charges twice", () => {
  test("two identical requests: 201 twice, identical bodies, one row in each table", async () => {
    const k = key();
    const first = await postCharge(api, body(), { key: k });
    const replay = await postCharge(api, body(), { key: k });
    expect(first.status).toBe(201);
    expect(replay.status).toBe(201);
    expect(await replay.text()).toBe(await first.text());
    expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
  });
});

describe("created", () => {
  test("201 with the charge, Location, and key + charge + outbox + stored response written together", async () => {
    const k = key();
    const res = await postCharge(api, body(4900), { key: k });
    expect(res.status).toBe(201);
    expect(res.headers.get("content-type")).toBe("application/json");
    expect(res.headers.get("idempotent-replayed")).toBeNull();
    const text = await res.text();
    const charge = JSON.parse(text) as { id: string; amountCents: number; currency: string; status: string; createdAt: string };
    expect(charge.amountCents).toBe(4900);
    // PAYMENT_PROCESSOR=none: the default currency, and succeeded at once.
    expect(charge.currency).toBe("usd");
    expect(charge.status).toBe("succeeded");
    expect(res.headers.get("location")).toBe(`/charges/${charge.id}`);
    const [row] = await db.sql`select amount_cents from charges where id = ${charge.id}`;
    expect(row?.amount_cents).toBe(4900);
    const [event] = await db.sql`select event_type, payload, published_at from outbox where aggregate_id = ${charge.id}`;
    expect(event?.event_type).toBe("ChargeCreated");
    expect(JSON.parse(event?.payload)).toEqual({ chargeId: charge.id, amountCents: 4900, currency: "usd" });
    expect(event?.published_at).toBeNull();
    const [stored] = await db.sql`
      select status, response_status, response_body, extract(epoch from expires_at - created_at)::int as ttl
        from idempotency_keys where key = ${k}`;
    expect(stored).toMatchObject({ status: "COMPLETED", response_status: 201, response_body: text, ttl: 86_400 });
  });

  test("GET /charges/:id returns what POST created, with its refunded total; unknown → 404, not a UUID → 400", async () => {
    const created = (await (await postCharge(api, body(123), { key: key() })).json()) as { id: string };
    const got = await getCharge(api, created.id);
    expect(got.status).toBe(200);
    expect(await got.json()).toEqual({ ...created, refundedCents: 0 });
    const missing = await getCharge(api, key());
    expect(missing.status).toBe(404);
    expect(missing.headers.get("content-type")).toBe("application/problem+json");
    const bad = await getCharge(api, "not-a-uuid");
    expect(bad.status).toBe(400);
    expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
  });
});

describe("ids", () => {
  test("the charge id is random (version 4); the event id is time-ordered (version 7) and grows request by request", async () => {
    const made: { charge: string; event: string; createdAt: string }[] = [];
    for (let i = 0; i < 5; i++) {
      const charge = (await (await postCharge(api, body(), { key: key() })).json()) as { id: string; createdAt: string };
      const [event] = await db.sql<{ id: string }[]>`select id from outbox where aggregate_id = ${charge.id}`;
      made.push({ charge: charge.id, event: event!.id, createdAt: charge.createdAt });
    }
    for (const { charge, event, createdAt } of made) {
      expect(charge[14]).toBe("4");
      expect(event[14]).toBe("7");
      // The first 48 bits are the Unix time in ms: the request's own, give or take the clock's tick.
      const ms = Number.parseInt(event.replaceAll("-", "").slice(0, 12), 16);
      expect(Math.abs(ms - Date.parse(createdAt))).toBeLessThan(1000);
    }
    const events = made.map((m) => m.event);
    expect([...events].sort()).toEqual(events);
  });
});

describe("trace context", () => {
  test("a valid W3C traceparent is stored on the outbox row; a malformed one is dropped", async () => {
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    expect((await postCharge(api, body(), { key: key(), headers: { traceparent } })).status).toBe(201);
    expect((await postCharge(api, body(), { key: key(), headers: { traceparent: "00-zz-bad" } })).status).toBe(201);
    const rows = await db.sql<{ traceparent: string | null }[]>`select traceparent from outbox order by created_at, traceparent nulls last`;
    expect(rows.map((r) => r.traceparent).sort()).toEqual([traceparent, null].sort());
  });
});

describe("one key, many spellings", () => {
  test("quoted, bare and upper-case forms of one UUID are one key", async () => {
    const k = key();
    const first = await postCharge(api, body(), { key: `"${k}"` });
    const bare = await postCharge(api, body(), { key: k.toUpperCase() });
    const quotedUpper = await postCharge(api, body(), { key: ` "${k.toUpperCase()}" ` });
    expect(first.status).toBe(201);
    for (const res of [bare, quotedUpper]) {
      expect(res.status).toBe(201);
      expect(res.headers.get("idempotent-replayed")).toBe("true");
    }
    const [stored] = await db.sql`select key from idempotency_keys`;
    expect(stored?.key).toBe(k.toLowerCase());
    expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
  });

  test.each([
    ["missing", null],
    ["empty", ""],
    ["an empty string", '""'],
    ["an unterminated string", '"8e03978e-40d5-43e8-bc93-6894a57f9324'],
    ["a string with parameters", '"8e03978e-40d5-43e8-bc93-6894a57f9324";a=1'],
    ["an inner list", '("8e03978e-40d5-43e8-bc93-6894a57f9324")'],
    ["a list", '"a", "b"'],
  ])("key %s → 400 problem, nothing written", async (_name, k) => {
    const res = await postCharge(api, body(), { key: k });
    expect(res.status).toBe(400);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    const problem = (await res.json()) as Record<string, unknown>;
    expect(problem).toMatchObject({ type: "https://charges.example/problems/invalid-idempotency-key", status: 400 });
    expect(typeof problem.title).toBe("string");
    expect(typeof problem.detail).toBe("string");
    expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
  });
});

describe("replays", () => {
  test("whitespace and property-order variants replay the stored response byte for byte", async () => {
    const k = key();
    const first = await postCharge(api, '{"amountCents":4900}', { key: k });
    const firstText = await first.text();
    const variants = ['  {  "amountCents" :  4900 }\n', '{"amountCents":4900.0}', '{"amountCents":49e2}'];
    for (const variant of variants) {
      const res = await postCharge(api, variant, { key: k });
      expect(res.status).toBe(201);
      expect(res.headers.get("idempotent-replayed")).toBe("true");
      expect(res.headers.get("location")).toBe(first.headers.get("location"));
      expect(await res.text()).toBe(firstText);
    }
    expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
  });

  test("same key, another amount → 422 problem, nothing written, original kept", async () => {
    const k = key();
    const first = await (await postCharge(api, body(100), { key: k })).text();
    const res = await postCharge(api, body(200), { key: k });
    expect(res.status).toBe(422);
    expect(await res.json()).toMatchObject({ type: "https://charges.example/problems/idempotency-key-reused", status: 422 });
    expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
    const [stored] = await db.sql`select response_body from idempotency_keys where key = ${k}`;
    expect(stored?.response_body).toBe(first);
  });

  test("the same key on another endpoint is another key", async () => {
    const k = key();
    await db.sql`insert into idempotency_keys (tenant, key, endpoint, request_hash, status, expires_at)
                 values (${TEST_TENANT}, ${k}, 'POST /refunds', 'other', 'COMPLETED', now() + interval '1 hour')`;
    const res = await postCharge(api, body(), { key: k });
    expect(res.status).toBe(201);
    expect(res.headers.get("idempotent-replayed")).toBeNull();
    expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 2 });
  });

  test("an expired key answers 410 naming its charge; once its tombstone has gone it is new again: a second charge, the key row overwritten", async () => {
    const k = key();
    const first = (await (await postCharge(api, body(100), { key: k })).json()) as { id: string };
    await db.sql`update idempotency_keys set expires_at = now() - interval '1 second' where key = ${k}`;
    const gone = await postCharge(api, body(100), { key: k });
    expect(gone.status).toBe(410);
    expect(gone.headers.get("location")).toBe(`/charges/${first.id}`);
    expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
    // The retention job's tombstone, at the end of its window.
    await db.sql`update idempotency_keys set status = 'EXPIRED', response_body = null, location = ${`/charges/${first.id}`} where key = ${k}`;
    const res = await postCharge(api, body(300), { key: k });
    expect(res.status).toBe(201);
    expect(res.headers.get("idempotent-replayed")).toBeNull();
    const second = (await res.json()) as { id: string; amountCents: number };
    expect(second.id).not.toBe(first.id);
    expect(second.amountCents).toBe(300);
    expect(await counts(db.sql)).toEqual({ charges: 2, outbox: 2, keys: 1 });
    const [stored] = await db.sql`select expires_at > now() as live from idempotency_keys where key = ${k}`;
    expect(stored?.live).toBe(true);
  });

  test("IDEMPOTENCY_TTL_SECONDS sets the retention of a new key", async () => {
    const shortApi = await startTestApi(db.url, { IDEMPOTENCY_TTL_SECONDS: "60" });
    try {
      const k = key();
      expect((await postCharge(shortApi, body(), { key: k })).status).toBe(201);
      const [row] = await db.sql`select extract(epoch from expires_at - created_at)::int as ttl from idempotency_keys where key = ${k}`;
      expect(row?.ttl).toBe(60);
    } finally {
      await shortApi.close();
    }
  });
});

describe("bad bodies write nothing and leave the key usable", () => {
  test.each([
    ["zero", body(0)],
    ["negative", body(-5)],
    ["a float", body(49.5)],
    ["a string", body("4900")],
    ["too large", body(2_147_483_648)],
    ["null", body(null)],
    ["missing", "{}"],
    ["an unknown field", '{"amountCents":4900,"currency":"BRL"}'],
    ["an array", "[4900]"],
    ["not JSON", '{"amountCents":'],
    ["empty", ""],
  ])("%s → 400 problem", async (_name, payload) => {
    const k = key();
    const res = await postCharge(api, payload, { key: k });
    expect(res.status).toBe(400);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    const problem = (await res.json()) as Record<string, unknown>;
    expect(problem).toMatchObject({ type: "https://charges.example/problems/invalid-body", status: 400 });
    expect(String(problem.detail)).not.toMatch(/select|insert|at .*\.ts/i);
    expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
    const fixed = await postCharge(api, body(4900), { key: k });
    expect(fixed.status).toBe(201);
    expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
  });

  test("the failing field is named", async () => {
    const res = await postCharge(api, '{"amountCents":0}', { key: key() });
    const problem = (await res.json()) as { errors: { field: string }[] };
    expect(problem.errors.map((e) => e.field)).toContain("amountCents");
  });

  test("the largest amount is accepted", async () => {
    const res = await postCharge(api, body(2_147_483_647), { key: key() });
    expect(res.status).toBe(201);
    expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
  });

  test.each([["text/plain"], ["application/x-www-form-urlencoded"], [""]])("Content-Type %p → 415", async (type) => {
    const res = await postCharge(api, body(), { key: key(), contentType: type });
    expect(res.status).toBe(415);
    expect(await res.json()).toMatchObject({ type: "https://charges.example/problems/unsupported-media-type", status: 415 });
    expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
  });

  test("application/json with a charset is JSON", async () => {
    const res = await postCharge(api, body(), { key: key(), contentType: "application/json; charset=utf-8" });
    expect(res.status).toBe(201);
  });

  test("a body over 16 KiB → 413, whether declared or streamed", async () => {
    const big = `{"amountCents":1${" ".repeat(17_000)}}`;
    const declared = await postCharge(api, big, { key: key() });
    expect(declared.status).toBe(413);
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(big));
        controller.close();
      },
    });
    const streamed = await api.fetch(
      new Request("http://localhost/charges", {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": key(), ...(await authHeaders()) },
        body: stream,
      }),
    );
    expect(streamed.status).toBe(413);
    expect(await streamed.json()).toMatchObject({ type: "https://charges.example/problems/body-too-large", status: 413 });
    expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
  });
});

describe("other routes", () => {
  test("healthz, readyz, openapi.json from the validating schemas, unknown route → 404 problem", async () => {
    expect((await api.fetch(new Request("http://localhost/healthz"))).status).toBe(200);
    expect((await api.fetch(new Request("http://localhost/readyz"))).status).toBe(200);
    const doc = (await (await api.fetch(new Request("http://localhost/openapi.json"))).json()) as {
      openapi: string;
      components: { schemas: { ChargeBody: { properties: { amountCents: { minimum: number; maximum: number } }; additionalProperties: boolean } } };
    };
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.components.schemas.ChargeBody.properties.amountCents).toMatchObject({ minimum: 1, maximum: 2147483647 });
    expect(doc.components.schemas.ChargeBody.additionalProperties).toBe(false);
    const missing = await api.fetch(new Request("http://localhost/nope"));
    expect(missing.status).toBe(404);
    expect(missing.headers.get("content-type")).toBe("application/problem+json");
  });
});
