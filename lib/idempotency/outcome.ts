// The one mapping from what the claim and the steps answered to an operation's outcome, for both
// modes: a key row, or a drive's result. Expected outcomes are values; only bugs and faults throw.
import type { DriveResult } from "./drive.ts";
import type { Operation, Refusal } from "./model.ts";
import type { KeyRow } from "./skeleton.ts";
import type { UnknownCause } from "./adapter.ts";

export type Outcome =
  | { readonly kind: "created"; readonly status: number; readonly body: string; readonly location: string | undefined }
  | { readonly kind: "replayed"; readonly status: number; readonly body: string; readonly location: string | undefined }
  /** The processor's final refusal (a decline), stored under the key: answered as the problem it stored. */
  | { readonly kind: "stored_problem"; readonly status: number; readonly body: string; readonly replayed: boolean }
  /** The processor's outcome is unknown: nothing stored, the key resumes at its recovery point. */
  | { readonly kind: "unknown_outcome"; readonly cause: UnknownCause; readonly detail: string }
  /** The key's recovery data failed its schema: parked for an operator. */
  | { readonly kind: "parked"; readonly reason: string }
  | { readonly kind: "payload_conflict" }
  /** The key's stored answer expired; its tombstone names the resource it made (never a second one). */
  | { readonly kind: "expired"; readonly location: string | undefined }
  | { readonly kind: "in_flight" }
  | { readonly kind: "refused"; readonly refusal: Refusal };

export type OutcomeKind = Outcome["kind"];

// Every kind, for the counters that start at zero: a Record, so a new kind fails to compile until named here.
const OUTCOME_KIND_SET: Readonly<Record<OutcomeKind, true>> = {
  created: true, replayed: true, payload_conflict: true, in_flight: true, refused: true,
  stored_problem: true, unknown_outcome: true, parked: true, expired: true,
};
export const OUTCOME_KINDS = Object.keys(OUTCOME_KIND_SET) as readonly OutcomeKind[];

export const IN_FLIGHT: Outcome = { kind: "in_flight" };

/**
 * A key row written before this request's statement: its stored answer, a conflict, or
 * "started". `ownBody`, the body this request would store, makes its own earlier try a creation.
 */
export function fromStored(op: Operation, row: KeyRow, requestHash: string, ownBody?: string): Outcome | "started" {
  if (row.request_hash !== requestHash) return { kind: "payload_conflict" };
  if (row.status === "EXPIRED") return { kind: "expired", location: row.location ?? (row.response_body === null ? undefined : op.locationOf(row.response_body)) };
  if (row.status !== "COMPLETED" || row.response_status === null || row.response_body === null) return "started";
  const { response_status: status, response_body: body } = row;
  if (status !== op.status) return { kind: "stored_problem", status, body, replayed: true };
  return { kind: body === ownBody ? "created" : "replayed", status, body, location: op.locationOf(body) };
}

/** What a key statement's row says when it wrote nothing: a stored answer, a 409, or the refusal. */
export async function fromUnwritten(op: Operation, row: KeyRow, requestHash: string, findNow: () => Promise<KeyRow | undefined>, refuse: (reason: string, detail: string | null) => Refusal, ownBody?: string): Promise<Outcome | "started"> {
  if (row.request_hash !== null) return fromStored(op, row, requestHash, ownBody);
  if (row.got === false) return IN_FLIGHT;
  // Refused, or locked but not written: decided on this statement's snapshot, which can predate
  // the commit of another request for the same key (whose lock this one then took). What that
  // request stored is the answer, not a refusal it made false.
  const now = await findNow();
  if (now) return fromStored(op, now, requestHash, ownBody);
  return row.refusal !== null ? { kind: "refused", refusal: refuse(row.refusal, row.detail) } : IN_FLIGHT;
}

export function createdOf(op: Operation, body: string): Outcome {
  return { kind: "created", status: op.status, body, location: op.locationOf(body) };
}

/** A drive's end as the request's outcome. */
export function fromDrive(op: Operation, result: DriveResult): Outcome {
  switch (result.kind) {
    case "final": {
      const { status, body } = result.response;
      if (status === op.status) return createdOf(op, body);
      return { kind: "stored_problem", status, body, replayed: false };
    }
    case "unknown":
      return { kind: "unknown_outcome", cause: result.cause, detail: result.detail };
    case "parked":
      return { kind: "parked", reason: result.reason };
    case "lost":
      // Another holder took the key over while this one called the processor: it answers later.
      return IN_FLIGHT;
  }
}
