// The model of an idempotent operation, declared in its own module (lib/charges/): a ledger
// operation is one statement; one with a `foreign` part runs as phase 1, its processor steps and
// phase 3. The engine never names an operation.
import type { Static, TObject } from "@sinclair/typebox";
import type postgres from "postgres";
import type { Sql } from "../platform/db.ts";
import type { ProblemSpec } from "./problem-types.ts";
import type { HeldAdapter, UnknownCause } from "./adapter.ts";
import type { FingerprintFields } from "./keys.ts";

export type Fragment = postgres.Fragment;

export const SQL_TYPES = ["uuid", "text", "int", "bigint", "boolean", "jsonb", "timestamptz"] as const;
export type SqlType = (typeof SQL_TYPES)[number];

export type ColumnValue = string | number | boolean | null;

/** The deployment's settings an operation's requests depend on. */
export interface OperationSettings {
  readonly defaultCurrency: string;
}

export const DEFAULT_SETTINGS: OperationSettings = { defaultCurrency: "usd" };

/** What a route hands its operation: the path parameters and the body, both already checked. */
export interface OperationInput<Body> {
  readonly params: Readonly<Record<string, string>>;
  readonly body: Body;
  /** DEFAULT_SETTINGS when absent. */
  readonly settings?: OperationSettings;
}

/** What one request will write, fixed before its first try so that every resend writes the same. */
export interface Prepared<Columns extends Record<string, ColumnValue>> {
  /** The operation's columns of this request's row (`req`). */
  readonly columns: Columns;
  /** The response body stored under the key and answered. */
  readonly body: string;
  /** Requests with the same value never share a statement: one statement cannot update one row twice. */
  readonly exclusive?: string;
}

/** An expected refusal: answered as a problem, nothing written, the key left unused. */
export interface Refusal {
  readonly problem: ProblemSpec;
  readonly detail: string;
  readonly extensions?: Record<string, unknown>;
}

/** Which statement an operation's SQL is spliced into: the ledger's single one, or phase 1. */
export type Mode = "ledger" | "processor";

/**
 * The operation's CTEs, spliced into the skeleton (skeleton.ts), which defines `req` (one row per
 * request) and `lock (n, got)`.
 *
 * `admit (n, refusal text, detail text, resume jsonb, answer text)` has a row for every `lock`
 * row that got its lock: refusal null to go ahead, else a reason `refuse` turns into a problem;
 * `resume`, what phase 1 adds to the key's recovery data; `answer`, a response body made of the
 * rows it read (null: Prepared.body). A check that must hold until the commit takes its row
 * locks here (SELECT … FOR UPDATE, in a stable order).
 *
 * `write` (CTEs, no trailing comma) reads `won`, the `req` rows whose key row was written, and
 * ends with `events (n, aggregate_type, aggregate_id, sequence, event_type, payload)` (ledger)
 * or `begun (n)` (phase 1's pending rows).
 */
export interface OperationSql {
  readonly admit: Fragment;
  readonly write: Fragment;
}

export interface Operation<Schema extends TObject = TObject, Columns extends Record<string, ColumnValue> = Record<string, ColumnValue>> {
  /** The OpenAPI operationId. */
  readonly name: string;
  readonly summary: string;
  readonly method: "POST";
  /** The route template; `${method} ${path}` is the key's endpoint scope. */
  readonly path: string;
  /** Path parameters that must be UUIDs (400 invalid-id otherwise). */
  readonly uuidParams: readonly string[];
  readonly body: Schema;
  /** For OpenAPI; the operation checks its bodies against it. */
  readonly response: TObject;
  /** A success's status: the only one ever stored under a key, but the processor's refusals. */
  readonly status: 200 | 201;
  /** The SQL type of each of the operation's columns, in the record type's order. */
  readonly columns: { readonly [K in keyof Columns]: SqlType };
  /** The fields that make "the same request". */
  fingerprint(input: OperationInput<Static<Schema>>): FingerprintFields;
  prepare(input: OperationInput<Static<Schema>>): Prepared<Columns>;
  sql(sql: Sql, mode: Mode): OperationSql;
  /** The problem for `admit`'s refusal `reason`. */
  refuse(reason: string, detail: string | null, input: OperationInput<Static<Schema>>): Refusal;
  /** The Location of a stored response body; undefined: no Location header. */
  locationOf(body: string): string | undefined;
  /** Problem statuses beside the core's, for OpenAPI: status → description. */
  readonly refusals: Readonly<Record<string, string>>;
  /** The operation's own problem types, by the client's PROBLEM names (test/client-types.test.ts). */
  readonly problems?: Readonly<Record<string, ProblemSpec>>;
  /** With a payment processor, the operation calls it between two transactions instead of one statement. */
  readonly foreign?: ForeignDeclaration<Static<Schema>>;
}

/** What every operation through the processor documents among its `refusals`, beside its own. */
export const PROCESSOR_REFUSALS = {
  "502": "The processor answered with an error: outcome unknown, nothing stored; retry with the same key (Retry-After)",
  "503": "Database unavailable, the token's signing keys could not be fetched, or too many requests in flight (overloaded); with a payment processor, also the processor unreachable (outcome unknown, nothing stored; retry with the same key). Retry-After",
  "504": "The processor did not answer in time: outcome unknown, nothing stored; retry with the same key (Retry-After)",
} as const;

/** The key's scope: the method and the route template, never a concrete path. */
export function endpointOf(op: Pick<Operation, "method" | "path">): string {
  return `${op.method} ${op.path}`;
}

/** The recovery data on a key (its `resume` column); each operation's has a schema. */
export type Resume = Readonly<Record<string, string | number | boolean | null>>;

export type FinalOutcome = "succeeded" | "refused";

export type StepResult<R = Resume> =
  /** Recorded; the step at `point` runs next. */
  | { readonly kind: "record"; readonly point: string; readonly resume: R }
  | { readonly kind: "final"; readonly outcome: FinalOutcome; readonly resume: R }
  /** The key stays STARTED at its recovery point. */
  | { readonly kind: "unknown"; readonly cause: UnknownCause; readonly detail: string; readonly resume: R };

export interface StepContext<R = Resume, Caps = unknown> {
  readonly resume: R;
  /** The declaration's `capabilities`, and nothing else of the processor. */
  readonly processor: Caps;
  /**
   * The first step of a drive that took the key over: an earlier holder may have called the
   * processor and not recorded its answer, so the step reads the processor's object first.
   */
  readonly resumed: boolean;
}

export interface StoredResponse {
  readonly status: number;
  readonly body: string;
}

/** Phase 3 of one key, decided before its statement: the response to store, and the operation's row. */
export interface FinalRow {
  readonly response: StoredResponse;
  readonly columns: Readonly<Record<string, ColumnValue>>;
}

/** Phase 3's CTEs, after the holder's compare-and-set defines `won`; `write` ends with `events`. */
export interface FinishSql {
  readonly columns: Readonly<Record<string, SqlType>>;
  readonly write: Fragment;
}

/** What one request of a foreign operation writes in phase 1, fixed before its first try. */
export interface ForeignPrepared<R = Resume> {
  readonly columns: Readonly<Record<string, ColumnValue>>;
  /** What the steps need, recorded on the key (the admit's `resume` adds to it). */
  readonly resume: Partial<R>;
  readonly exclusive?: string;
}

/** An operation through the processor: phase 1 (`sql` in `processor` mode), its steps, phase 3. */
export interface ForeignDeclaration<Body, R = Resume, Caps = unknown> {
  readonly columns: Readonly<Record<string, SqlType>>;
  /** A request this mode cannot take (a body member it requires). */
  validate(input: OperationInput<Body>): Refusal | undefined;
  prepare(input: OperationInput<Body>, traceparent: string | null): ForeignPrepared<R>;
  /** The recovery data's schema, checked whenever a key's resume is read (a failure parks the key). */
  readonly resume: TObject;
  /** The resume's ids an operator sees; the first, the object the key began, is what `ops resolve` takes. */
  readonly operatorIds: readonly string[];
  /** The resume's fields an operator's resolution fills: the processor's object id, or its refusal code. */
  readonly resolution: { readonly succeeded: string; readonly refused: string };
  /** The calls the steps make, built from the processor adapter. */
  capabilities(adapter: HeldAdapter): Caps;
  readonly firstPoint: string;
  readonly steps: Readonly<Record<string, (ctx: StepContext<R, Caps>) => Promise<StepResult<R>>>>;
  final(outcome: FinalOutcome, resume: R): FinalRow;
  finishSql(sql: Sql): FinishSql;
  /** Keys whose phase 3 share this value never share a statement. */
  exclusive?(resume: R): string;
}

/**
 * A typed declaration as the engine holds it. The erasure is sound: every resume read is checked
 * against `resume` (drive.ts) before a step sees it, and the steps get their own `capabilities`.
 */
export function foreign<Body, R, Caps>(declaration: ForeignDeclaration<Body, R, Caps>): ForeignDeclaration<Body> {
  return declaration as unknown as ForeignDeclaration<Body>;
}
