// A key past its answer's expiry (IDEMPOTENCY_TTL_SECONDS) answers 410 Gone naming the resource
// it made, as long as its tombstone lives (IDEMPOTENCY_TOMBSTONE_SECONDS), and never makes a
// second charge; once the tombstone has gone the key is new again. The real `bun api.ts` on raw
// sockets (ledger mode), and the in-process API through the processor simulator (stripe mode).
// Time passes by moving the row's expires_at, as the clock would: never a sleep.
import { afterAll, beforeEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { loadConfig } from "../lib/platform/config.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { newGauges, runJob } from "../lib/ops/jobs.ts";
import { freshDatabase } from "../testkit/services.ts";
import { killAll, startEntrypoint } from "../testkit/processes.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { http11, raw, type RawResponse } from "../testkit/raw-http.ts";
import { postCharge } from "../testkit/api.ts";
import { chargeWith, paymentsOf, processorTestContext } from "../testkit/processor.ts";

setDefaultTimeout(60_000);

const EXPIRED_TYPE = "https://charges.example/problems/idempotency-key-expired";
const db = await freshDatabase("key_expiry");
const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, ...authEnv() } });
const config = loadConfig({ DATABASE_URL: db.url });
afterAll(async () => {
  await killAll();
  await db.drop();
});
beforeEach(async () => {
  await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
});

async function post(key: string, amountCents: number, tenant = "tenant-a"): Promise<RawResponse> {
  const head = http11("POST /charges", "host: api", "content-type: application/json", `idempotency-key: ${key}`, `authorization: Bearer ${await tokenFor(tenant)}`);
  return raw(api.port, head, JSON.stringify({ amountCents }));
}

/** The key's answer (or its tombstone) ends now, as IDEMPOTENCY_TTL_SECONDS (or IDEMPOTENCY_TOMBSTONE_SECONDS) later would. */
async function lapse(key: string): Promise<void> {
  await db.sql`update idempotency_keys set expires_at = now() - interval '1 second' where key = ${key}`;
}

async function chargesOf(tenant = "tenant-a"): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from charges where tenant = ${tenant}`;
  return row!.n;
}

describe("ledger (PAYMENT_PROCESSOR=none), raw HTTP", () => {
  test("past its expiry a key answers 410 naming its charge, before and after the retention job made its tombstone; never a second charge", async () => {
    const key = `order-${crypto.randomUUID()}`;
    const first = await post(key, 4900);
    expect(first.status).toBe(201);
    const location = first.headers.location!;
    expect(location).toBe(`/charges/${JSON.parse(first.body).id}`);
    await lapse(key);

    // The retention job has not run yet: the expired answer already reads as a tombstone.
    const before = await post(key, 4900);
    expect(before.status).toBe(410);
    expect(before.headers["content-type"]).toBe("application/problem+json");
    expect(before.headers.location).toBe(location);
    expect(JSON.parse(before.body)).toMatchObject({ type: EXPIRED_TYPE, status: 410, resource: location });

    expect(await runJob("key-retention", db.sql, config, newGauges(), silentLogger)).toMatchObject({ tombstoned: 1 });
    const [row] = await db.sql<{ status: string; response_body: string | null; location: string; request_hash: string }[]>`
      select status, response_body, location, request_hash from idempotency_keys where key = ${key}`;
    expect(row).toMatchObject({ status: "EXPIRED", response_body: null, location });

    const after = await post(key, 4900);
    expect(after.status).toBe(410);
    expect(after.headers.location).toBe(location);
    expect(JSON.parse(after.body)).toMatchObject({ type: EXPIRED_TYPE, resource: location });
    expect(after.headers["idempotent-replayed"]).toBeUndefined();
    expect(await chargesOf()).toBe(1);
  });

  test("the tombstone keeps the fingerprint: another request with the key is a 422, as during the answer's life", async () => {
    const key = `order-${crypto.randomUUID()}`;
    expect((await post(key, 4900)).status).toBe(201);
    await lapse(key);
    await runJob("key-retention", db.sql, config, newGauges(), silentLogger);
    const other = await post(key, 5000);
    expect(other.status).toBe(422);
    expect(JSON.parse(other.body).type).toBe("https://charges.example/problems/idempotency-key-reused");
    expect(await chargesOf()).toBe(1);
  });

  test("another tenant's tombstone is not this tenant's key", async () => {
    const key = `order-${crypto.randomUUID()}`;
    expect((await post(key, 4900, "tenant-x")).status).toBe(201);
    await lapse(key);
    await runJob("key-retention", db.sql, config, newGauges(), silentLogger);
    const mine = await post(key, 4900, "tenant-y");
    expect(mine.status).toBe(201);
    expect(mine.headers["idempotent-replayed"]).toBeUndefined();
    expect(await chargesOf("tenant-y")).toBe(1);
  });

  test("once the tombstone has gone too the key is new again: a second charge, by design", async () => {
    const key = `order-${crypto.randomUUID()}`;
    const first = await post(key, 4900);
    await lapse(key);
    await runJob("key-retention", db.sql, config, newGauges(), silentLogger);
    await lapse(key);
    // Before the job deletes the tombstone past its end, and after: new either way.
    const again = await post(key, 4900);
    expect(again.status).toBe(201);
    expect(again.headers.location).not.toBe(first.headers.location);
    const [row] = await db.sql<{ status: string; location: string | null }[]>`select status, location from idempotency_keys where key = ${key}`;
    expect(row).toEqual({ status: "COMPLETED", location: null });
    expect(await chargesOf()).toBe(2);
  });
});

describe("through the processor (PAYMENT_PROCESSOR=stripe)", async () => {
  const p = await processorTestContext("key_expiry_processor", 3000);

  test("an expired key answers 410 naming its charge; the processor is not called again", async () => {
    const key = `order-${crypto.randomUUID()}`;
    const first = await postCharge(p.api, chargeWith(4900), { key });
    expect(first.status).toBe(201);
    const { id } = (await first.json()) as { id: string };
    await p.db.sql`update idempotency_keys set expires_at = now() - interval '1 second' where key = ${key}`;
    const before = await postCharge(p.api, chargeWith(4900), { key });
    expect(before.status).toBe(410);
    expect(before.headers.get("location")).toBe(`/charges/${id}`);
    await runJob("key-retention", p.db.sql, loadConfig({ DATABASE_URL: p.db.url }), newGauges(), silentLogger);
    const [row] = await p.db.sql<{ status: string; resume: unknown; completed_at: Date | null }[]>`select status, resume, completed_at from idempotency_keys where key = ${key}`;
    expect(row?.status).toBe("EXPIRED");
    expect(row?.resume).toBeNull();
    expect(row?.completed_at).toBeInstanceOf(Date);
    const after = await postCharge(p.api, chargeWith(4900), { key });
    expect(after.status).toBe(410);
    expect(await after.json()).toMatchObject({ type: EXPIRED_TYPE, resource: `/charges/${id}` });
    expect(paymentsOf(p.sim.ledger(), id)).toHaveLength(1);
    const [n] = await p.db.sql<{ n: number }[]>`select count(*)::int as n from charges`;
    expect(n!.n).toBe(1);
  });
});
