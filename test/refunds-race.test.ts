// One key, two statements: the second decides after the first has committed, on a snapshot
// taken before that commit. It must answer what the first stored (a replay), never a refusal
// the first made true (refund-exceeds-charge). Held deterministically: this test plays the
// first request's transaction (the refund, the charge's new total and the COMPLETED key row,
// exactly as the API writes them), keeps it open while the API's statement for the same key
// waits on the charge row, then commits.
import { setDefaultTimeout } from "bun:test";
import { expect, test } from "bun:test";
import { apiTestContext, waitForApiBlockedOnLock } from "../testkit/api.ts";
import { TEST_TENANT } from "../testkit/auth.ts";
import { newCharge, postRefund, refundBody, REFUNDS_ENDPOINT } from "../testkit/refunds.ts";
import { fingerprint } from "../lib/idempotency/keys.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("refunds_race");

// The stored key outlives the test by far; the API's default TTL is a day.
const KEY_TTL = "1 day";

test("a refund whose key commits while the same key's statement waits is answered with the stored 201, not refund-exceeds-charge", async () => {
  const chargeId = await newCharge(api, 500);
  const key = crypto.randomUUID();
  const refundId = crypto.randomUUID();
  // The first request's answer as the core stores it: the bytes a replay must return.
  const stored = JSON.stringify({ id: refundId, chargeId, amountCents: 500, createdAt: new Date().toISOString() });
  const first = await db.sql.reserve();
  let second: Promise<Response> | undefined;
  try {
    await first`begin`;
    await first`update charges set refunded_cents = refunded_cents + 500, last_sequence = last_sequence + 1 where id = ${chargeId}`;
    await first`insert into refunds (id, charge_id, tenant, amount_cents) values (${refundId}, ${chargeId}, ${TEST_TENANT}, 500)`;
    await first`
      insert into idempotency_keys (tenant, key, endpoint, request_hash, status, response_status, response_body, expires_at)
      values (${TEST_TENANT}, ${key}, ${REFUNDS_ENDPOINT}, ${fingerprint({ chargeId, amountCents: 500 })}, 'COMPLETED', 201, ${stored},
              now() + ${KEY_TTL}::interval)`;
    // The same key and body: its statement's snapshot cannot see the uncommitted key row, it
    // takes the key's advisory lock (the first holds none here), and waits on the charge row.
    second = postRefund(api, chargeId, refundBody(500), { key });
    await waitForApiBlockedOnLock(db.sql);
    await first`commit`;
  } finally {
    first.release();
  }
  const res = await second;
  const text = await res.text();
  expect({ status: res.status, body: text }).toEqual({ status: 201, body: stored });
  expect(res.headers.get("location")).toBe(`/charges/${chargeId}/refunds/${refundId}`);
  // Nothing more written: the one refund, the charge's total, the one key.
  const [row] = await db.sql<{ refunds: number; refunded: number; keys: number }[]>`
    select (select count(*) from refunds)::int as refunds,
           (select refunded_cents from charges where id = ${chargeId}) as refunded,
           (select count(*) from idempotency_keys where key = ${key})::int as keys`;
  expect(row).toEqual({ refunds: 1, refunded: 500, keys: 1 });
});
