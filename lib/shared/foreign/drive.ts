// Phase 2 and 3 of a foreign step, for whoever holds the key's lease: a request that began it
// or resumed it, or the completer. Steps run from the recovery point; between them nothing
// is held but the lease (no transaction, no row lock, no pooled connection).
import type { Sql } from "../db.ts";
import type { ProcessorClient } from "../processor/client.ts";
import { directWrites, type LeaseWrites } from "./lease.ts";
import type { DriveResult, ForeignProcess, HeldKey } from "./types.ts";

export interface DriveOptions {
  readonly processor: ProcessorClient;
  /** The lease each recorded step renews (leaseMsFor). */
  readonly leaseMs: number;
  /** How the steps' writes reach the database; each its own statement when absent. */
  readonly writes?: LeaseWrites;
}

// A drive makes at most two calls in a row (create then confirm, or read then confirm); the
// lease covers both at their time bound, twice over, plus the transactions around them.
const CALLS_PER_LEASE = 4;
const LEASE_MARGIN_MS = 5000;

/** A lease long enough for a drive's calls at PAYMENT_PROCESSOR_TIMEOUT_MS. */
export function leaseMsFor(timeoutMs: number): number {
  return CALLS_PER_LEASE * timeoutMs + LEASE_MARGIN_MS;
}

// More steps than any process has: a loop between recovery points is a bug, not a wait.
const MAX_STEPS = 8;

/**
 * Runs `key`'s steps until a final state (written by phase 3), an unknown outcome (the lease
 * given up, the recovery point kept), or the lease lost to another holder (nothing written).
 * `resumed`: the key was taken over rather than begun by this holder.
 */
export async function drive(sql: Sql, process: ForeignProcess, start: HeldKey, resumed: boolean, options: DriveOptions): Promise<DriveResult> {
  let key = start;
  const writes = options.writes ?? directWrites(sql, process, options.leaseMs);
  for (let i = 0; i < MAX_STEPS; i++) {
    const step = process.steps[key.point];
    if (step === undefined) throw new Error(`bug: ${process.endpoint} has no step at ${key.point}`);
    const result = await step({ resume: key.resume, processor: options.processor, resumed: resumed && i === 0 });
    switch (result.kind) {
      case "record": {
        if (!(await writes.record(key, result.point, result.resume))) return { kind: "lost" };
        key = { ...key, point: result.point, resume: result.resume };
        break;
      }
      case "final": {
        const response = await writes.finish(key, result.outcome, result.resume);
        return response === undefined ? { kind: "lost" } : { kind: "final", outcome: result.outcome, response };
      }
      case "unknown": {
        if (!(await writes.release(key, result.resume, `${result.cause}: ${result.detail}`))) return { kind: "lost" };
        return { kind: "unknown", cause: result.cause, detail: result.detail };
      }
      default: {
        const unreachable: never = result;
        throw new Error(`bug: unknown step result ${JSON.stringify(unreachable)}`);
      }
    }
  }
  throw new Error(`bug: ${process.endpoint} ran ${MAX_STEPS} steps without an end`);
}
