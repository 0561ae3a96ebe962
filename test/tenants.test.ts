// Keys are scoped to the tenant: one client can never read, replay or block another's charge.
// Also: the event carries its tenant (envelope and MQTT 5 user property, at a real broker),
// and the schema change leaves rows written before tenants existed with the 'default' tenant.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { createSql, type Sql } from "../lib/platform/db.ts";
import { migrate, readMigrations } from "../lib/platform/migrations.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay } from "../lib/relay/loop.ts";
import { CHARGE_CREATED } from "../lib/charges/events.ts";
import { apiTestContext, counts, getCharge, postCharge, waitForApiBlockedOnLock } from "../testkit/api.ts";
import { createScratchDatabase, holdKey, scratchName } from "../testkit/database.ts";
import { collect } from "../testkit/mqtt.ts";
import { services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("tenants");
const A = "tenant-a";
const B = "tenant-b";
const body = (amount = 4900) => JSON.stringify({ amountCents: amount });

interface Charge {
  readonly id: string;
}

describe("two tenants, one key", () => {
  test("the same key and body → two distinct charges, neither replayed", async () => {
    const key = "order-123-payment";
    const a = await postCharge(api, body(), { key, tenant: A });
    const b = await postCharge(api, body(), { key, tenant: B });
    for (const res of [a, b]) {
      expect(res.status).toBe(201);
      expect(res.headers.get("idempotent-replayed")).toBeNull();
    }
    const [idA, idB] = [((await a.json()) as Charge).id, ((await b.json()) as Charge).id];
    expect(idA).not.toBe(idB);
    const rows = await db.sql<{ id: string; tenant: string }[]>`select id, tenant from charges order by tenant`;
    expect([...rows]).toEqual([{ id: idA, tenant: A }, { id: idB, tenant: B }]);
    const keys = await db.sql<{ tenant: string; key: string }[]>`select tenant, key from idempotency_keys order by tenant`;
    expect([...keys]).toEqual([{ tenant: A, key }, { tenant: B, key }]);
    // Each tenant's retry replays its own charge.
    const againA = await postCharge(api, body(), { key, tenant: A });
    expect(againA.headers.get("idempotent-replayed")).toBe("true");
    expect(((await againA.json()) as Charge).id).toBe(idA);
  });

  test("B reusing A's key with another body → 201, not 422 (nothing tells B the key exists)", async () => {
    const key = crypto.randomUUID();
    expect((await postCharge(api, body(100), { key, tenant: A })).status).toBe(201);
    const b = await postCharge(api, body(999), { key, tenant: B });
    expect(b.status).toBe(201);
    expect(b.headers.get("idempotent-replayed")).toBeNull();
    expect(await counts(db.sql)).toEqual({ charges: 2, outbox: 2, keys: 2 });
  });

  test("B reading A's charge → 404, the same answer as for an id that does not exist", async () => {
    const created = (await (await postCharge(api, body(), { key: crypto.randomUUID(), tenant: A })).json()) as Charge;
    expect((await getCharge(api, created.id, A)).status).toBe(200);
    const theirs = await getCharge(api, created.id, B);
    const unknownId = crypto.randomUUID();
    const unknown = await getCharge(api, unknownId, B);
    expect(theirs.status).toBe(404);
    expect(unknown.status).toBe(404);
    const [p1, p2] = [(await theirs.json()) as Record<string, string>, (await unknown.json()) as Record<string, string>];
    expect(p1.detail!.replace(created.id, "<id>")).toBe(p2.detail!.replace(unknownId, "<id>"));
    expect({ ...p1, detail: "" }).toEqual({ ...p2, detail: "" });
  });

  test("A and B racing on one key → both 201 created: A held in flight does not hold B up", async () => {
    const key = crypto.randomUUID();
    // A's request is held inside its statement (an uncommitted key row of A's ahead of it).
    const hold = await holdKey(db.sql, key, "POST /charges", A);
    try {
      const a = postCharge(api, body(), { key, tenant: A });
      await waitForApiBlockedOnLock(db.sql);
      // With the key global, B would answer 409 here (A's lock) or queue behind A's row.
      const b = await postCharge(api, body(), { key, tenant: B });
      expect(b.status).toBe(201);
      expect(b.headers.get("idempotent-replayed")).toBeNull();
      await hold.release();
      const resA = await a;
      expect(resA.status).toBe(201);
      expect(resA.headers.get("idempotent-replayed")).toBeNull();
    } finally {
      await hold.release();
    }
    expect(await counts(db.sql)).toEqual({ charges: 2, outbox: 2, keys: 2 });
  });

  test("A and B sending one key at the same moment → both 201 created", async () => {
    const key = "shared-key-" + crypto.randomUUID();
    const answers = await Promise.all([postCharge(api, body(), { key, tenant: A }), postCharge(api, body(), { key, tenant: B })]);
    for (const res of answers) {
      expect(res.status).toBe(201);
      expect(res.headers.get("idempotent-replayed")).toBeNull();
    }
    expect(await counts(db.sql)).toEqual({ charges: 2, outbox: 2, keys: 2 });
  });
});

describe("the event carries the tenant", () => {
  test("envelope tenantId and, over MQTT 5, the user property tenant-id, at a subscriber on a real broker", async () => {
    const { mqttUrl, mqtt5 } = await services();
    const prefix = `test/${crypto.randomUUID()}/`;
    const collector = await collect(mqttUrl, prefix);
    const relaySql: Sql = createSql(db.url, { max: 4, applicationName: "relay-test" });
    const broker = connectBroker(mqttUrl);
    const relay = createRelay({ sql: relaySql, broker, batchSize: 50, pollMs: 5000, topicPrefix: prefix });
    try {
      const a = (await (await postCharge(api, body(), { key: crypto.randomUUID(), tenant: A })).json()) as Charge;
      const b = (await (await postCharge(api, body(), { key: crypto.randomUUID(), tenant: B })).json()) as Charge;
      await waitUntil(() => broker.connected, 5000, "broker connection");
      expect(await relay.runOnce()).toBe(2);
      for (const [charge, tenant] of [[a, A], [b, B]] as const) {
        const message = await collector.waitForMessage(
          (m) => m.envelope?.type === CHARGE_CREATED && m.envelope.aggregateId === charge.id,
          10_000,
          `the event of ${tenant}'s charge`,
        );
        expect(message.envelope?.tenantId).toBe(tenant);
        expect(message.body.tenantId).toBe(tenant);
        if (mqtt5) expect(message.packet.properties?.userProperties?.["tenant-id"]).toBe(tenant);
      }
    } finally {
      await relay.stop();
      await broker.close();
      await relaySql.end({ timeout: 5 });
      await collector.close();
    }
  });
});

describe("the schema change", () => {
  test("a database from before tenants: rows get 'default', keys become unique per tenant, applying the baseline twice is harmless", async () => {
    const { adminDatabaseUrl } = await services();
    const old = await createScratchDatabase(adminDatabaseUrl, scratchName("t", "pretenant"), { migrate: false });
    try {
      await old.sql.unsafe(`
        create table charges (id uuid primary key, amount_cents integer not null check (amount_cents > 0), created_at timestamptz not null default now());
        create table idempotency_keys (key text not null, endpoint text not null, request_hash text not null,
          status text not null check (status in ('STARTED', 'COMPLETED')), response_status integer, response_body text,
          created_at timestamptz not null default now(), expires_at timestamptz not null, unique (key, endpoint));
        create table outbox (id uuid primary key, aggregate_id uuid not null references charges(id), event_type text not null,
          payload text not null, created_at timestamptz not null default now(), published_at timestamptz);
        insert into charges (id, amount_cents) values ('11111111-1111-4111-8111-111111111111', 100);
        insert into idempotency_keys (key, endpoint, request_hash, status, expires_at)
          values ('old-key', 'POST /charges', 'h', 'COMPLETED', now() + interval '1 hour');
        insert into outbox (id, aggregate_id, event_type, payload)
          values ('22222222-2222-4222-8222-222222222222', '11111111-1111-4111-8111-111111111111', 'ChargeCreated', '{}');`);
      expect(await migrate(old.sql)).toEqual({ kind: "applied", names: (await readMigrations()).map((m) => m.name) });
      // Every statement of the baseline is idempotent: the whole file again, as if never recorded.
      await old.sql`delete from schema_history where version = 1`;
      expect(await migrate(old.sql)).toEqual({ kind: "applied", names: ["0001_baseline"] });
      const [row] = await old.sql<{ k: string; c: string; o: string }[]>`
        select (select tenant from idempotency_keys) as k, (select tenant from charges) as c, (select tenant from outbox) as o`;
      expect(row).toEqual({ k: "default", c: "default", o: "default" });
      // The old key no longer blocks another tenant: same key and endpoint, another tenant.
      await old.sql`insert into idempotency_keys (tenant, key, endpoint, request_hash, status, expires_at)
                    values ('tenant-b', 'old-key', 'POST /charges', 'h', 'COMPLETED', now() + interval '1 hour')`;
      const duplicate = await old.sql`insert into idempotency_keys (tenant, key, endpoint, request_hash, status, expires_at)
                    values ('tenant-b', 'old-key', 'POST /charges', 'h', 'COMPLETED', now() + interval '1 hour')`.catch((e: { code?: string }) => e.code);
      expect(duplicate).toBe("23505");
    } finally {
      await old.drop();
    }
  });
});
