// A foreign step: the part of an idempotent operation that calls another service (a payment
// processor) between two transactions. The declaration lives beside its operation's tables
// (lib/shared/processor/operations.ts) so that the API, which begins it, and the operations
// jobs, which finish what nobody asks about any more, drive it with the same code
// (drive.ts). Neither process folder imports the other's.
import type postgres from "postgres";
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

/** A value of phase 3's rows (jsonb_to_recordset's input). */
export type FinalValue = string | number | boolean | null;

/** Phase 3 of one key, decided before its statement: the response to store, and the operation's row. */
export interface FinalRow {
  readonly response: StoredResponse;
  /** The operation's columns of phase 3's `req` (finishSql's `columns`). */
  readonly columns: Readonly<Record<string, FinalValue>>;
}

/**
 * Phase 3's SQL (finish.ts), spliced after the holder's compare-and-set, which defines `won`
 * (n, tenant, event_id, traceparent and the `columns`: the keys this statement completed):
 *  - `columns`: name → SQL type of the operation's columns;
 *  - `write`: CTEs that write the final rows for `won`, ending with
 *    `events (n, aggregate_type, aggregate_id, sequence, event_type, payload)`.
 */
export interface FinishSql {
  readonly columns: Readonly<Record<string, string>>;
  readonly write: postgres.Fragment;
}

export interface ForeignProcess {
  /** The key's endpoint scope ("POST /charges"). */
  readonly endpoint: string;
  /** The recovery point phase 1 writes. */
  readonly firstPoint: string;
  /** Each recovery point's step. */
  readonly steps: Readonly<Record<string, (ctx: StepContext) => Promise<StepResult>>>;
  /** Phase 3 as values: what the key stores and the row the operation's SQL writes. */
  final(key: KeyRef, outcome: FinalOutcome, resume: Resume): FinalRow;
  /** Phase 3's writes, one statement for any number of keys (finish.ts). */
  finishSql(sql: Sql): FinishSql;
  /**
   * Keys whose phase 3 share this value never share a statement (an UPDATE … FROM writes a
   * row once, whatever the rows joined to it): the charge two refunds settle.
   */
  exclusive?(resume: Resume): string;
}

/** What a drive ended with. */
export type DriveResult =
  | { readonly kind: "final"; readonly outcome: FinalOutcome; readonly response: StoredResponse }
  | { readonly kind: "unknown"; readonly cause: UnknownCause; readonly detail: string }
  /** The lease was taken over while this holder called the processor: it wrote nothing. */
  | { readonly kind: "lost" };
