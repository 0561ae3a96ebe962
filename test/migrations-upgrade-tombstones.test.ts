// The upgrade to migration 0008 (key tombstones) from the release before it: keys that release
// wrote, completed and live or already past their expiry, get their tombstone from this
// release's retention job when they expire, and answer 410 naming their charge; the migration
// itself touches no row.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { loadConfig } from "../lib/platform/config.ts";
import { createSql } from "../lib/platform/db.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { migrate, readMigrations } from "../lib/platform/migrations.ts";
import { applySchema } from "../lib/platform/startup.ts";
import { fingerprint } from "../lib/idempotency/keys.ts";
import { newGauges, runJob } from "../lib/ops/jobs.ts";
import type { ApiProcess } from "../lib/api/start.ts";
import { postCharge, startTestApi } from "../testkit/api.ts";
import { TEST_TENANT } from "../testkit/auth.ts";
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../testkit/database.ts";
import { services } from "../testkit/services.ts";

setDefaultTimeout(60_000);

const AMOUNT_CENTS = 4900;
const EXPIRED_KEY = "written-before-0008-expired";
const LIVE_KEY = "written-before-0008-live";

const { adminDatabaseUrl } = await services();
let db: ScratchDatabase;
let api: ApiProcess;
let applied: readonly string[];
const charges = { expired: crypto.randomUUID(), live: crypto.randomUUID() };

beforeAll(async () => {
  db = await createScratchDatabase(adminDatabaseUrl, scratchName("t", "upgrade_tombstones"), { migrate: false });
  const known = await readMigrations();
  const before = known.filter((m) => m.name < "0008");
  expect(before.at(-1)?.name).not.toBe("0008_key_tombstones");
  await migrate(db.sql, before);
  // As the previous release's ledger statement wrote them: COMPLETED, the 201 and its body.
  const hash = fingerprint({ amountCents: AMOUNT_CENTS });
  for (const [key, id, expires] of [[EXPIRED_KEY, charges.expired, "-1 minute"], [LIVE_KEY, charges.live, "1 hour"]] as const) {
    const body = JSON.stringify({ id, amountCents: AMOUNT_CENTS });
    await db.sql`insert into charges (id, tenant, amount_cents) values (${id}, ${TEST_TENANT}, ${AMOUNT_CENTS})`;
    await db.sql`insert into idempotency_keys (tenant, key, endpoint, request_hash, status, response_status, response_body, created_at, expires_at)
                 values (${TEST_TENANT}, ${key}, 'POST /charges', ${hash}, 'COMPLETED', 201, ${body}, now() - interval '1 day', now() + ${expires}::interval)`;
  }
  applied = await applySchema(createSql(db.url, { max: 1, applicationName: "charges-upgrade" }));
  api = await startTestApi(db.url);
});
afterAll(async () => {
  await api.close();
  await db.drop();
});

const config = () => loadConfig({ DATABASE_URL: db.url });

describe("keys written before 0008", () => {
  test("0008 and the later ones alone run, and change no row", async () => {
    expect(applied).toEqual((await readMigrations()).map((m) => m.name).filter((name) => name >= "0008"));
    const rows = await db.sql<{ key: string; status: string; location: string | null }[]>`select key, status, location from idempotency_keys order by key`;
    expect([...rows]).toEqual([
      { key: EXPIRED_KEY, status: "COMPLETED", location: null },
      { key: LIVE_KEY, status: "COMPLETED", location: null },
    ]);
  });

  test("the expired one answers 410 naming its charge, and the retention job makes its tombstone; the live one replays", async () => {
    const gone = await postCharge(api, JSON.stringify({ amountCents: AMOUNT_CENTS }), { key: EXPIRED_KEY });
    expect(gone.status).toBe(410);
    expect(gone.headers.get("location")).toBe(`/charges/${charges.expired}`);
    expect(await runJob("key-retention", db.sql, config(), newGauges(), silentLogger)).toMatchObject({ tombstoned: 1, deleted: 0 });
    const [tomb] = await db.sql<{ status: string; response_body: string | null; location: string; completed_at: Date }[]>`
      select status, response_body, location, completed_at from idempotency_keys where key = ${EXPIRED_KEY}`;
    expect(tomb).toMatchObject({ status: "EXPIRED", response_body: null, location: `/charges/${charges.expired}` });
    const replay = await postCharge(api, JSON.stringify({ amountCents: AMOUNT_CENTS }), { key: LIVE_KEY });
    expect(replay.status).toBe(201);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
  });

  test("the live one gets its tombstone when it expires in turn", async () => {
    await db.sql`update idempotency_keys set expires_at = now() - interval '1 second' where key = ${LIVE_KEY}`;
    expect(await runJob("key-retention", db.sql, config(), newGauges(), silentLogger)).toMatchObject({ tombstoned: 1 });
    const gone = await postCharge(api, JSON.stringify({ amountCents: AMOUNT_CENTS }), { key: LIVE_KEY });
    expect(gone.status).toBe(410);
    expect(await gone.json()).toMatchObject({ resource: `/charges/${charges.live}` });
    const [n] = await db.sql<{ n: number }[]>`select count(*)::int as n from charges`;
    expect(n!.n).toBe(2);
  });
});
