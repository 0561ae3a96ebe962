// Phase 2 and 3 of an operation's processor steps, for whoever holds the key's lease: a request
// that began it or resumed it, or the completer. Steps run from the recovery point; between
// them nothing is held but the lease (no transaction, no row lock, no pooled connection).
import { Value } from "@sinclair/typebox/value";
import type { Sql } from "../platform/db.ts";
import type { HeldAdapter, UnknownCause } from "./adapter.ts";
import { inSpan, tracingOn } from "../platform/trace-context.ts";
import { registerFormats } from "../platform/schemas.ts";
import type { FinalOutcome, ForeignDeclaration, Operation, Resume, StoredResponse } from "./model.ts";
import type { HeldKey } from "./skeleton.ts";
import { groupedWrites, type LeaseWrites } from "./lease.ts";

export interface DriveOptions {
  readonly processor: HeldAdapter;
  /** The lease each recorded step renews (leaseMsFor). */
  readonly leaseMs: number;
  /** How the steps' writes reach the database; each its own statement when absent. */
  readonly writes?: LeaseWrites;
  /** A key taken over from a holder that is gone (idempotency_resumed_total). */
  readonly onResumed?: (endpoint: string) => void;
}

export type DriveResult =
  | { readonly kind: "final"; readonly outcome: FinalOutcome; readonly response: StoredResponse }
  | { readonly kind: "unknown"; readonly cause: UnknownCause; readonly detail: string }
  /** The lease was taken over while this holder called the processor: it wrote nothing. */
  | { readonly kind: "lost" }
  /** The key's recovery data failed its schema: parked, `reason` naming the field. */
  | { readonly kind: "parked"; readonly reason: string };

// A drive makes at most three calls in a row; the lease covers four at their time bound, plus the
// transactions around them. A longer one (a listing of many pages) is harmless: a holder that
// lost its lease writes nothing, and the next one starts over.
const CALLS_PER_LEASE = 4;
const LEASE_MARGIN_MS = 5000;

/** A lease long enough for a drive's calls at PAYMENT_PROCESSOR_TIMEOUT_MS. */
export function leaseMsFor(timeoutMs: number): number {
  return CALLS_PER_LEASE * timeoutMs + LEASE_MARGIN_MS;
}

// More steps than any operation has: a loop between recovery points is a bug, not a wait.
const MAX_STEPS = 8;

/** Why `resume` fails its schema, naming the field ("resume.amountCents: Expected integer"). */
function resumeFault(declaration: ForeignDeclaration<unknown>, resume: Resume): string | undefined {
  // The schemas' formats (uuid) are ours, in every process that reads a resume (the ops jobs too).
  registerFormats();
  if (Value.Check(declaration.resume, resume)) return undefined;
  const first = Value.Errors(declaration.resume, resume).First();
  const field = first?.path.replace(/^\//, "").replace(/\//g, ".") || "(whole)";
  return `resume.${field}: ${first?.message ?? "does not match its schema"}`;
}

const capabilities = new WeakMap<HeldAdapter, Map<ForeignDeclaration<unknown>, unknown>>();

function capabilitiesOf(declaration: ForeignDeclaration<unknown>, adapter: HeldAdapter): unknown {
  let byDeclaration = capabilities.get(adapter);
  if (byDeclaration === undefined) capabilities.set(adapter, (byDeclaration = new Map()));
  if (!byDeclaration.has(declaration)) byDeclaration.set(declaration, declaration.capabilities(adapter));
  return byDeclaration.get(declaration);
}

/** Runs the steps from the key's recovery point to a final state, an unknown outcome, a lost lease or a park. */
export async function drive(sql: Sql, op: Operation, start: HeldKey, resumed: boolean, options: DriveOptions): Promise<DriveResult> {
  const declaration = op.foreign!;
  if (resumed) options.onResumed?.(start.endpoint);
  const writes = options.writes ?? groupedWrites(sql, op, options.leaseMs);
  const fault = resumeFault(declaration, start.resume);
  if (fault !== undefined) return (await writes.park(start, fault)) ? { kind: "parked", reason: fault } : { kind: "lost" };
  const processor = capabilitiesOf(declaration, options.processor);
  let key = start;
  for (let i = 0; i < MAX_STEPS; i++) {
    const step = declaration.steps[key.point];
    if (step === undefined) throw new Error(`bug: ${op.name} has no step at ${key.point}`);
    const ctx = { resume: key.resume, processor, resumed: resumed && i === 0 };
    const result = tracingOn() ? await inSpan(`${op.name} ${key.point}`, key.resume.traceparent, { "charges.step": key.point }, () => step(ctx)) : await step(ctx);
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
  throw new Error(`bug: ${op.name} ran ${MAX_STEPS} steps without an end`);
}
