// The upgrade from the release of migration 0004 (the payment processor) to this one, whose
// phase 3 builds its answer from the key's resume alone and so needs `createdAt` there. Keys
// that release left STARTED (a crash, an unknown outcome) carry no `createdAt`: migration 0005
// copies it from their charge or refund row, and this release finishes such a key with the
// creation time its charge row holds.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { fingerprint } from "../lib/idempotency/keys.ts";
import { createSql, type Sql } from "../lib/platform/db.ts";
import { migrate, readMigrations } from "../lib/platform/migrations.ts";
import { applySchema } from "../lib/platform/startup.ts";
import { getCharge, postCharge } from "../testkit/api.ts";
import { TEST_TENANT } from "../testkit/auth.ts";
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../testkit/database.ts";
import { startProcessorSim, type ProcessorSim } from "../testkit/processor-sim.ts";
import { chargeWith, confirmationsOf, keyState, paymentsOf, startProcessorApi } from "../testkit/processor.ts";
import { services } from "../testkit/services.ts";

setDefaultTimeout(60_000);

const AMOUNT_CENTS = 4900;
// Microseconds in the row: the API's spelling has milliseconds, as every createdAt it writes.
const CHARGE_CREATED_AT = "2026-11-30T08:15:42.123456Z";
const CHARGE_CREATED_AT_API = "2026-11-30T08:15:42.123Z";
const REFUND_CREATED_AT = "2026-11-30T09:00:00.5Z";
const REFUND_CREATED_AT_API = "2026-11-30T09:00:00.500Z";
const CHARGE_KEY = "left-started-by-0004";
const REFUND_KEY = "refund-left-started-by-0004";

const { adminDatabaseUrl } = await services();
let db: ScratchDatabase;
let sim: ProcessorSim;
let applied: readonly string[];
let chargeId: string;

/** A charge and a refund in flight, as the release of 0004 left them when its process died. */
async function writeAsRelease0004(sql: Sql): Promise<string> {
  const pending = crypto.randomUUID();
  const refunded = crypto.randomUUID();
  const refundId = crypto.randomUUID();
  const resume = { chargeId: pending, amountCents: AMOUNT_CENTS, currency: "usd", paymentMethod: "pm_card_visa", traceparent: null };
  const requestHash = fingerprint({ amountCents: AMOUNT_CENTS, paymentMethod: "pm_card_visa" });
  await sql.begin(async (tx) => {
    await tx`insert into charges (id, tenant, amount_cents, currency, status, created_at)
             values (${pending}, ${TEST_TENANT}, ${AMOUNT_CENTS}, 'usd', 'pending', ${CHARGE_CREATED_AT})`;
    await tx`insert into idempotency_keys (tenant, key, endpoint, request_hash, status, expires_at, recovery_point, lease_token, lease_until, resume)
             values (${TEST_TENANT}, ${CHARGE_KEY}, 'POST /charges', ${requestHash}, 'STARTED', now() + interval '1 day',
                     'begun', ${crypto.randomUUID()}, now() - interval '1 minute', ${tx.json(resume)})`;
    await tx`insert into charges (id, tenant, amount_cents, currency, status, processor_payment_id, pending_refund_cents, last_sequence)
             values (${refunded}, ${TEST_TENANT}, ${AMOUNT_CENTS}, 'usd', 'succeeded', 'pi_old', 1000, 1)`;
    await tx`insert into refunds (id, charge_id, tenant, amount_cents, created_at, status)
             values (${refundId}, ${refunded}, ${TEST_TENANT}, 1000, ${REFUND_CREATED_AT}, 'pending')`;
    await tx`insert into idempotency_keys (tenant, key, endpoint, request_hash, status, expires_at, recovery_point, lease_token, lease_until, resume)
             values (${TEST_TENANT}, ${REFUND_KEY}, 'POST /charges/:id/refunds', 'h', 'STARTED', now() + interval '1 day', 'begun',
                     ${crypto.randomUUID()}, now() + interval '1 hour',
                     ${tx.json({ refundId, chargeId: refunded, amountCents: 1000, paymentId: "pi_old", traceparent: null })})`;
  });
  return pending;
}

beforeAll(async () => {
  db = await createScratchDatabase(adminDatabaseUrl, scratchName("t", "upgrade_resume"), { migrate: false });
  sim = await startProcessorSim();
  const known = await readMigrations();
  expect(known[3]?.name).toBe("0004_payment_processor");
  await migrate(db.sql, known.slice(0, 4));
  chargeId = await writeAsRelease0004(db.sql);
  applied = await applySchema(createSql(db.url, { max: 1, applicationName: "charges-upgrade" }));
});
afterAll(async () => {
  await sim.stop();
  await db.drop();
});

describe("STARTED keys of the release of 0004", () => {
  test("0005 (and the later ones) alone run, and 0005 gives each its row's creation time as the API spells it", async () => {
    expect(applied).toEqual((await readMigrations()).map((m) => m.name).filter((name) => name >= "0005"));
    expect((await keyState(db.sql, CHARGE_KEY))?.resume?.createdAt).toBe(CHARGE_CREATED_AT_API);
    expect((await keyState(db.sql, REFUND_KEY))?.resume?.createdAt).toBe(REFUND_CREATED_AT_API);
  });

  test("the same request resumes the charge and answers it with that time; the processor charged once", async () => {
    const api = await startProcessorApi(db.url, sim);
    try {
      const response = await postCharge(api, chargeWith(AMOUNT_CENTS), { key: CHARGE_KEY });
      expect(response.status).toBe(201);
      const body = (await response.json()) as { id: string; status: string; createdAt: string };
      expect(body).toMatchObject({ id: chargeId, status: "succeeded", createdAt: CHARGE_CREATED_AT_API });
      const view = (await (await getCharge(api, chargeId)).json()) as { status: string; createdAt: string };
      expect(view).toMatchObject({ status: "succeeded", createdAt: CHARGE_CREATED_AT_API });
      const ledger = await sim.ledger();
      expect(paymentsOf(ledger, chargeId)).toHaveLength(1);
      expect(confirmationsOf(ledger, chargeId)).toBe(1);
      expect((await keyState(db.sql, CHARGE_KEY))?.status).toBe("COMPLETED");
    } finally {
      await api.close();
    }
  });
});
