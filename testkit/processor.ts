// Helpers for the tests of charges and refunds through the payment processor: an in-process
// API pointed at the simulator (and a test file's whole setup of them), the key row as the
// foreign step leaves it, and the simulator's ledger for one charge or refund.
import { afterAll, beforeEach } from "bun:test";
import type { ApiOptions, ApiProcess } from "../lib/api/start.ts";
import type { Sql } from "../lib/platform/db.ts";
import type { SimLedger, SimPaymentIntentEntry, SimRefundEntry } from "../dev/processor-sim/types.ts";
import { startTestApi } from "./api.ts";
import { SIM_KEY, startProcessorSim, type ProcessorSim } from "./processor-sim.ts";
import { freshDatabase, type TestDatabase } from "./services.ts";

/** What the API needs to talk to `sim`; `timeoutMs` bounds each call (a hang answers 504 after it). */
export function processorEnv(sim: ProcessorSim, timeoutMs = 3000): Record<string, string> {
  return { PAYMENT_PROCESSOR: "stripe", PAYMENT_PROCESSOR_URL: sim.url, PAYMENT_PROCESSOR_KEY: SIM_KEY, PAYMENT_PROCESSOR_TIMEOUT_MS: String(timeoutMs) };
}

export function startProcessorApi(databaseUrl: string, sim: ProcessorSim, env: Record<string, string> = {}, options: ApiOptions = {}): Promise<ApiProcess> {
  return startTestApi(databaseUrl, { ...processorEnv(sim), ...env }, options);
}

export interface ProcessorTestContext {
  readonly db: TestDatabase;
  readonly sim: ProcessorSim;
  readonly api: ApiProcess;
  /** One more API on the same database and simulator, closed with the first. */
  readonly startApi: () => Promise<ApiProcess>;
}

/**
 * For a test file: its own database, a simulator and an in-process API talking to it (each
 * call bounded by `timeoutMs`), all closed after the file; before each test the simulator's
 * faults are cleared and the four tables emptied.
 */
export async function processorTestContext(label: string, timeoutMs: number): Promise<ProcessorTestContext> {
  const db = await freshDatabase(label);
  const sim = await startProcessorSim();
  const apis: ApiProcess[] = [];
  const startApi = async (): Promise<ApiProcess> => {
    const api = await startProcessorApi(db.url, sim, { PAYMENT_PROCESSOR_TIMEOUT_MS: String(timeoutMs) });
    apis.push(api);
    return api;
  };
  const api = await startApi();
  afterAll(async () => {
    for (const each of apis) await each.close();
    await sim.stop();
    await db.drop();
  });
  beforeEach(async () => {
    sim.clearFaults();
    await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
  });
  return { db, sim, api, startApi };
}

/** A charge's body through the processor. */
export const chargeWith = (amountCents: number, paymentMethod = "pm_card_visa", currency?: string): string =>
  JSON.stringify({ amountCents, paymentMethod, ...(currency !== undefined && { currency }) });

export interface KeyState {
  readonly status: "STARTED" | "COMPLETED";
  readonly recovery_point: string | null;
  readonly lease_token: string | null;
  readonly lease_alive: boolean;
  readonly resume: Record<string, string | number | null> | null;
  readonly response_status: number | null;
  readonly response_body: string | null;
  readonly attempts: number;
  readonly last_error: string | null;
  readonly parked: boolean;
}

/** The key row (any tenant: tests use distinct keys). */
export async function keyState(sql: Sql, key: string): Promise<KeyState | undefined> {
  const [row] = await sql<KeyState[]>`
    select status, recovery_point, lease_token, coalesce(lease_until > now(), false) as lease_alive, resume,
           response_status, response_body, attempts, last_error, parked_at is not null as parked
      from idempotency_keys where key = ${key}`;
  return row;
}

/** The key's holder is gone: its lease ends now (what a SIGKILL leaves once the lease runs out). */
export async function expireLease(sql: Sql, key: string): Promise<void> {
  await sql`update idempotency_keys set lease_until = now() - interval '1 second', next_attempt_at = null where key = ${key}`;
}

/** The simulator's payments made for one charge (its metadata[charge_id]). */
export function paymentsOf(ledger: SimLedger, chargeId: string): SimPaymentIntentEntry[] {
  return ledger.paymentIntents.filter((p) => p.metadata.charge_id === chargeId);
}

/** The simulator's refunds made for one refund (its metadata[refund_id]). */
export function refundsOf(ledger: SimLedger, refundId: string): SimRefundEntry[] {
  return ledger.refunds.filter((r) => r.metadata.refund_id === refundId);
}

/** Money moved for a charge: the confirmations of all its payments (at most one, ever). */
export function confirmationsOf(ledger: SimLedger, chargeId: string): number {
  return paymentsOf(ledger, chargeId).reduce((n, p) => n + p.confirmations, 0);
}
