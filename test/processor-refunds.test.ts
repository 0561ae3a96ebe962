// POST /charges/:id/refunds through the payment processor (the simulator): the reservation in
// phase 1, the processor's refund under a key derived from the refund, phase 3's confirmation
// or release, and each ambiguous answer on the refund call. The simulator's ledger is the
// judge: at most one refund per refund key, and never more refunded than charged.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { resolveKey } from "../lib/ops/parked.ts";
import { loadConfig } from "../lib/shared/config.ts";
import { createProcessorClient } from "../lib/shared/processor/client.ts";
import { postCharge } from "../testkit/api.ts";
import { chargeWith, keyState, processorEnv, processorTestContext, refundsOf } from "../testkit/processor.ts";
import { getRefund, postRefund, refundBody } from "../testkit/refunds.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const TIMEOUT_MS = 1500;
const { db, sim, api } = await processorTestContext("processor_refunds", TIMEOUT_MS);

const key = () => crypto.randomUUID();

async function charged(amountCents: number, method = "pm_card_visa"): Promise<{ id: string; status: number }> {
  const res = await postCharge(api, chargeWith(amountCents, method), { key: key() });
  const body = (await res.json()) as { id?: string; chargeId?: string };
  return { id: String(body.id ?? body.chargeId), status: res.status };
}

async function chargeRow(id: string): Promise<{ refunded_cents: number; pending_refund_cents: number; last_sequence: number }> {
  const [row] = await db.sql<{ refunded_cents: number; pending_refund_cents: number; last_sequence: number }[]>`
    select refunded_cents, pending_refund_cents, last_sequence from charges where id = ${id}::uuid`;
  return row!;
}

async function refundIdOf(k: string): Promise<string> {
  const id = (await keyState(db.sql, k))?.resume?.refundId;
  if (typeof id !== "string") throw new Error("the key has no refund id");
  return id;
}

describe("the processor's final answers", () => {
  test("it refunds: 201; the processor's refund under the refund's key, for its amount; the reservation becomes the refunded total; ChargeRefunded is sequence 2", async () => {
    const charge = await charged(3000);
    const k = key();
    const res = await postRefund(api, charge.id, refundBody(1200), { key: k });
    expect(res.status).toBe(201);
    const refund = (await res.json()) as { id: string; chargeId: string; amountCents: number };
    expect(refund).toMatchObject({ chargeId: charge.id, amountCents: 1200 });
    expect(refundsOf(sim.ledger(), refund.id).map((r) => [r.amount, r.status, r.idempotencyKey])).toEqual([[1200, "succeeded", `${refund.id}:refund`]]);
    expect(await chargeRow(charge.id)).toEqual({ refunded_cents: 1200, pending_refund_cents: 0, last_sequence: 2 });
    const [event] = await db.sql<{ event_type: string; sequence: number; payload: string }[]>`
      select event_type, sequence, payload from outbox where aggregate_id = ${charge.id}::uuid and event_type = 'ChargeRefunded'`;
    expect(event).toMatchObject({ sequence: 2 });
    expect(JSON.parse(event!.payload)).toEqual({ chargeId: charge.id, refundId: refund.id, amountCents: 1200, refundedCents: 1200 });
    const [row] = await db.sql`select status, processor_refund_id from refunds where id = ${refund.id}::uuid`;
    expect(row).toEqual({ status: "succeeded", processor_refund_id: refundsOf(sim.ledger(), refund.id)[0]!.id });
    expect(await (await getRefund(api, charge.id, refund.id)).json()).toEqual({ ...refund, status: "succeeded" });
  });

  test("a charge that did not succeed is not refundable: 422 charge-not-refundable, nothing written, the processor untouched", async () => {
    const declined = await charged(800, "pm_card_chargeDeclined");
    expect(declined.status).toBe(402);
    const refundsBefore = sim.ledger().refunds.length;
    const res = await postRefund(api, declined.id, refundBody(100), { key: key() });
    expect(res.status).toBe(422);
    expect(((await res.json()) as { type: string }).type).toBe("https://charges.example/problems/charge-not-refundable");
    expect(sim.ledger().refunds.length).toBe(refundsBefore);
    expect(await chargeRow(declined.id)).toMatchObject({ refunded_cents: 0, pending_refund_cents: 0 });
  });

  test("a pending refund is reserved: while one is held at the processor, another beyond what is left is 422 refund-exceeds-charge", async () => {
    const charge = await charged(1000);
    sim.setFaults({ rules: [{ kind: "hang", op: "refund", times: 1 }] });
    const held = postRefund(api, charge.id, refundBody(700), { key: key() });
    await waitUntil(async () => (await chargeRow(charge.id)).pending_refund_cents === 700, 10_000, "the first refund reserved");
    const over = await postRefund(api, charge.id, refundBody(400), { key: key() });
    expect(over.status).toBe(422);
    expect(await over.json()).toMatchObject({ type: "https://charges.example/problems/refund-exceeds-charge", leftCents: 300 });
    expect((await held).status).toBe(504);
    const fits = await postRefund(api, charge.id, refundBody(300), { key: key() });
    expect(fits.status).toBe(201);
    expect(await chargeRow(charge.id)).toEqual({ refunded_cents: 300, pending_refund_cents: 700, last_sequence: 2 });
  });
});

const UNKNOWN_STATUS = { hang: 504, "drop-after": 503, refuse: 503 } as const;

describe("an unknown outcome on refund", () => {
  test.each(["hang", "drop-after", "refuse"] as const)(
    "%s: 5xx with Retry-After, the reservation held, the key STARTED; the same key then refunds once",
    async (kind) => {
      const charge = await charged(2000);
      const k = key();
      sim.setFaults({ rules: [{ kind, op: "refund", times: kind === "drop-after" ? 2 : 1 }] });
      if (kind === "refuse") await sim.settled();
      const first = await postRefund(api, charge.id, refundBody(500), { key: k });
      expect(first.status).toBe(UNKNOWN_STATUS[kind]);
      expect(first.headers.get("retry-after")).not.toBeNull();
      expect(await keyState(db.sql, k)).toMatchObject({ status: "STARTED", recovery_point: "begun", response_status: null });
      expect(await chargeRow(charge.id)).toMatchObject({ refunded_cents: 0, pending_refund_cents: 500 });
      expect(((await (await getRefund(api, charge.id, await refundIdOf(k))).json()) as { status: string }).status).toBe("pending");
      sim.clearFaults();
      await sim.settled();
      const second = await postRefund(api, charge.id, refundBody(500), { key: k });
      expect(second.status).toBe(201);
      const refundId = await refundIdOf(k);
      expect(refundsOf(sim.ledger(), refundId).map((r) => [r.amount, r.status])).toEqual([[500, "succeeded"]]);
      expect(await chargeRow(charge.id)).toEqual({ refunded_cents: 500, pending_refund_cents: 0, last_sequence: 2 });
    },
  );

  // The processor stores its 500 under the refund's key and answers it again for a day; a
  // refund's key never changes (a new one could refund twice). Nothing the API can read tells a
  // 500 before the refund from one after it: the key stays unknown, the completer parks it,
  // and the operator resolves it with what the processor's dashboard shows.
  test.each(["500-before", "500-after"] as const)(
    "%s: 502 again on every try, never guessed; the reservation held; the operator's resolution matches the processor",
    async (kind) => {
      const charge = await charged(2000);
      const k = key();
      sim.setFaults({ rules: [{ kind, op: "refund", times: 1 }] });
      expect((await postRefund(api, charge.id, refundBody(600), { key: k })).status).toBe(502);
      sim.clearFaults();
      expect((await postRefund(api, charge.id, refundBody(600), { key: k })).status).toBe(502);
      const refundId = await refundIdOf(k);
      const atProcessor = refundsOf(sim.ledger(), refundId);
      expect(atProcessor.length).toBe(kind === "500-after" ? 1 : 0);
      expect(await chargeRow(charge.id)).toMatchObject({ refunded_cents: 0, pending_refund_cents: 600 });

      const config = loadConfig({ DATABASE_URL: db.url, ...processorEnv(sim) });
      const resolution = kind === "500-after" ? { kind: "succeeded" as const, processorId: atProcessor[0]!.id } : { kind: "refused" as const, code: "not_at_processor" };
      const result = await resolveKey(db.sql, refundId, resolution, createProcessorClient(config.processor), 10_000);
      expect(result).toMatchObject({ resolved: true, outcome: resolution.kind });
      expect(await chargeRow(charge.id)).toMatchObject(kind === "500-after" ? { refunded_cents: 600, pending_refund_cents: 0 } : { refunded_cents: 0, pending_refund_cents: 0 });
      const replay = await postRefund(api, charge.id, refundBody(600), { key: k });
      expect(replay.status).toBe(kind === "500-after" ? 201 : 422);
      expect(replay.headers.get("idempotent-replayed")).toBe("true");
      expect(refundsOf(sim.ledger(), refundId).length).toBe(atProcessor.length);
    },
  );
});
