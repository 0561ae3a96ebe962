// GET /charges/idempotency-key: a tenant asks what became of a key it used, per operation. The
// real `bun api.ts` on raw sockets (ledger mode), and through the processor simulator for the
// states only the processor's steps leave (in flight, parked).
import { afterAll, beforeEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { loadConfig } from "../lib/platform/config.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { newGauges, runJob } from "../lib/ops/jobs.ts";
import { freshDatabase } from "../testkit/services.ts";
import { killAll, startEntrypoint } from "../testkit/processes.ts";
import { authEnv, authHeaders, tokenFor } from "../testkit/auth.ts";
import { http11, raw, type RawResponse } from "../testkit/raw-http.ts";
import { postCharge } from "../testkit/api.ts";
import { waitUntil } from "../testkit/wait.ts";
import { chargeWith, processorTestContext } from "../testkit/processor.ts";
import type { ApiProcess } from "../lib/api/start.ts";
import { OPERATIONS } from "../lib/charges/index.ts";
import { endpointOf } from "../lib/idempotency/model.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("key_state");
const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, ...authEnv() } });
afterAll(async () => {
  await killAll();
  await db.drop();
});
beforeEach(async () => {
  await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
});

interface OperationState {
  readonly operation: string;
  readonly endpoint: string;
  readonly state: string;
  readonly [field: string]: unknown;
}

async function stateOf(key: string | null, tenant: string | null = "tenant-a"): Promise<RawResponse> {
  const headers = ["host: api"];
  if (key !== null) headers.push(`idempotency-key: ${key}`);
  if (tenant !== null) headers.push(`authorization: Bearer ${await tokenFor(tenant)}`);
  return raw(api.port, http11("GET /charges/idempotency-key", ...headers));
}

const operations = (res: RawResponse): OperationState[] => (JSON.parse(res.body) as { operations: OperationState[] }).operations;

async function post(path: string, key: string, body: object, tenant = "tenant-a"): Promise<RawResponse> {
  const head = http11(`POST ${path}`, "host: api", "content-type: application/json", `idempotency-key: ${key}`, `authorization: Bearer ${await tokenFor(tenant)}`);
  return raw(api.port, head, JSON.stringify(body));
}

describe("ledger (PAYMENT_PROCESSOR=none), raw HTTP", () => {
  test("a key never used reads unknown for every operation; another tenant's key reads byte for byte the same", async () => {
    const key = `order-${crypto.randomUUID()}`;
    const never = await stateOf(key);
    expect(never.status).toBe(200);
    expect(never.headers["cache-control"]).toBe("private, no-store");
    expect(JSON.parse(never.body)).toEqual({
      key,
      operations: OPERATIONS.map((op) => ({ operation: op.name, endpoint: endpointOf(op), state: "unknown" })),
    });
    expect(operations(never).slice(0, 2).map((o) => o.endpoint)).toEqual(["POST /charges", "POST /charges/:id/refunds"]);
    expect((await post("/charges", key, { amountCents: 4900 }, "tenant-b")).status).toBe(201);
    const others = await stateOf(key);
    expect(others.status).toBe(200);
    expect(others.body).toBe(never.body);
  });

  test("completed, per operation: the stored status, the resource, when it completed and when its answer expires", async () => {
    const key = `order-${crypto.randomUUID()}`;
    const charge = await post("/charges", key, { amountCents: 4900 });
    const chargeId = JSON.parse(charge.body).id as string;
    const refund = await post(`/charges/${chargeId}/refunds`, key, { amountCents: 900 });
    expect(refund.status).toBe(201);
    const res = await stateOf(`"${key}"`);
    expect(res.status).toBe(200);
    const [onCharge, onRefund] = operations(res);
    const rows = await db.sql<{ endpoint: string; created_at: Date; expires_at: Date }[]>`select endpoint, created_at, expires_at from idempotency_keys where key = ${key} order by endpoint`;
    expect(onCharge).toEqual({
      operation: "createCharge", endpoint: "POST /charges", state: "completed", status: 201, location: charge.headers.location,
      completedAt: rows[0]!.created_at.toISOString(), expiresAt: rows[0]!.expires_at.toISOString(),
    });
    expect(onRefund).toMatchObject({ state: "completed", status: 201, location: refund.headers.location, expiresAt: rows[1]!.expires_at.toISOString() });
  });

  test("expired: the resource still named; once tombstoned, until when the tombstone lives; then unknown again", async () => {
    const key = `order-${crypto.randomUUID()}`;
    const charge = await post("/charges", key, { amountCents: 4900 });
    await db.sql`update idempotency_keys set expires_at = now() - interval '1 second' where key = ${key}`;
    const lapsed = operations(await stateOf(key))[0]!;
    expect(lapsed).toMatchObject({ state: "expired", status: 201, location: charge.headers.location });
    expect(lapsed.expiresAt).toBeUndefined();
    await runJob("key-retention", db.sql, loadConfig({ DATABASE_URL: db.url }), newGauges(), silentLogger);
    const [row] = await db.sql<{ expires_at: Date }[]>`select expires_at from idempotency_keys where key = ${key}`;
    expect(operations(await stateOf(key))[0]).toMatchObject({ state: "expired", location: charge.headers.location, expiresAt: row!.expires_at.toISOString() });
    await db.sql`update idempotency_keys set expires_at = now() - interval '1 second' where key = ${key}`;
    expect(operations(await stateOf(key))[0]).toEqual({ operation: "createCharge", endpoint: "POST /charges", state: "unknown" });
  });

  test("a bad key is a 400 problem, no key a 400, no token a 401", async () => {
    const long = await stateOf("k".repeat(256));
    expect(long.status).toBe(400);
    expect(JSON.parse(long.body)).toMatchObject({ type: "https://charges.example/problems/invalid-idempotency-key", detail: expect.stringContaining("255") });
    expect((await stateOf(null)).status).toBe(400);
    expect((await stateOf("order-1", null)).status).toBe(401);
  });
});

describe("through the processor (PAYMENT_PROCESSOR=stripe)", async () => {
  const p = await processorTestContext("key_state_processor", 2000);
  const get = async (target: ApiProcess, key: string): Promise<OperationState> => {
    const res = await target.fetch(new Request("http://localhost/charges/idempotency-key", { headers: { ...(await authHeaders()), "idempotency-key": key } }));
    expect(res.status).toBe(200);
    return ((await res.json()) as { operations: OperationState[] }).operations[0]!;
  };

  test("in flight while its confirm is held at the processor: the recovery point and the lease's end", async () => {
    const key = `order-${crypto.randomUUID()}`;
    p.sim.setFaults({ rules: [{ kind: "hang", op: "confirm", times: 1 }] });
    const first = postCharge(p.api, chargeWith(610), { key });
    await waitUntil(() => p.sim.requests().some((r) => r.op === "confirm" && r.state === "hung"), 10_000, "the confirm held");
    const [row] = await p.db.sql<{ lease_until: Date }[]>`select lease_until from idempotency_keys where key = ${key}`;
    expect(await get(p.api, key)).toEqual({ operation: "createCharge", endpoint: "POST /charges", state: "in_flight", recoveryPoint: "created", leaseUntil: row!.lease_until.toISOString() });
    expect((await first).status).toBe(504);
  });

  test("parked: the reason names the field", async () => {
    const key = `order-${crypto.randomUUID()}`;
    p.sim.setFaults({ rules: [{ kind: "500-after", op: "confirm", times: 1 }] });
    expect((await postCharge(p.api, chargeWith(1700), { key })).status).toBe(502);
    await p.db.sql`update idempotency_keys set resume = jsonb_set(resume, '{amountCents}', '"seventeen"'), lease_until = now() - interval '1 second' where key = ${key}`;
    expect((await postCharge(p.api, chargeWith(1700), { key })).status).toBe(409);
    const state = await get(p.api, key);
    expect(state.state).toBe("parked");
    expect(String(state.reason)).toStartWith("resume.amountCents:");
  });
});
