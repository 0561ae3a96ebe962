// A foreign step: the part of an idempotent operation that calls another service (a payment
// processor) between two transactions. The declaration lives beside its operation's tables
// (lib/shared/processor/operations.ts) so that the API, which begins it, and the operations
// jobs, which finish what nobody asks about any more, drive it with the same code
// (drive.ts). Neither process folder imports the other's.
import type { Sql } from "../db.ts";
import type { ProcessorClient, UnknownCause } from "../processor/client.ts";

/**
 * What the steps recorded on the key (its `resume` column): the operation's inputs, written
 * in phase 1, then each step's results (the processor's ids, the attempt numbers of its keys).
 */
export type Resume = Readonly<Record<string, string | number | null>>;

/** The key row a foreign step acts on. */
export interface KeyRef {
  readonly tenant: string;
  readonly key: string;
  readonly endpoint: string;
}

/** A key whose lease this process holds: its token, and how far the steps got. */
export interface HeldKey extends KeyRef {
  readonly token: string;
  readonly point: string;
  readonly resume: Resume;
}

/** The final states a foreign step reaches: what the processor did, never a guess. */
export type FinalOutcome = "succeeded" | "refused";

export type StepResult =
  /** The step's result is recorded and the next step (`point`) runs. */
  | { readonly kind: "record"; readonly point: string; readonly resume: Resume }
  /** The processor's answer is final: phase 3 writes it. */
  | { readonly kind: "final"; readonly outcome: FinalOutcome; readonly resume: Resume }
  /** The outcome is not known: the key stays STARTED at its recovery point (with `resume`, e.g. a key's next attempt). */
  | { readonly kind: "unknown"; readonly cause: UnknownCause; readonly detail: string; readonly resume: Resume };

export interface StepContext {
  readonly resume: Resume;
  readonly processor: ProcessorClient;
  /**
   * True for the first step of a drive that took the key over (a resume): an earlier holder
   * may have called the processor and not lived to record what it answered, so the step reads
   * the processor's object before it acts.
   */
  readonly resumed: boolean;
}

/** The response phase 3 stores under the key and answers. */
export interface StoredResponse {
  readonly status: number;
  readonly body: string;
}

export interface ForeignProcess {
  /** The key's endpoint scope ("POST /charges"). */
  readonly endpoint: string;
  /** The recovery point phase 1 writes. */
  readonly firstPoint: string;
  /** Each recovery point's step. */
  readonly steps: Readonly<Record<string, (ctx: StepContext) => Promise<StepResult>>>;
  /**
   * Phase 3's writes, in `tx` (which holds the key row locked for its lease holder): the
   * operation's final rows and event, and the response to store.
   */
  finish(tx: Sql, key: KeyRef, outcome: FinalOutcome, resume: Resume): Promise<StoredResponse>;
}

/** What a drive ended with. */
export type DriveResult =
  | { readonly kind: "final"; readonly outcome: FinalOutcome; readonly response: StoredResponse }
  | { readonly kind: "unknown"; readonly cause: UnknownCause; readonly detail: string }
  /** The lease was taken over while this holder called the processor: it wrote nothing. */
  | { readonly kind: "lost" };
