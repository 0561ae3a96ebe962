// The model of an idempotent operation, declared once in its own module (lib/charges/) and read
// by the API, the completer and the operator's tools. A ledger operation is one statement; one
// with a `foreign` part runs as phase 1, its processor steps, and phase 3. The generic code
// (lib/idempotency) never names an operation.
import type { Static, TObject } from "@sinclair/typebox";
import type postgres from "postgres";
import type { Sql } from "../platform/db.ts";
import type { ProblemSpec } from "./problem-types.ts";
import type { HeldAdapter, UnknownCause } from "./adapter.ts";
import type { FingerprintFields } from "./keys.ts";

/** A postgres.js fragment (sql`…` nested in another statement). */
export type Fragment = postgres.Fragment;

/** The SQL types an operation's own columns may have (they name the request row's record type). */
export type SqlType = "uuid" | "text" | "int" | "bigint" | "boolean" | "jsonb" | "timestamptz";

/** A value of one of those columns, as JSON carries it to jsonb_to_recordset. */
export type ColumnValue = string | number | boolean | null;

/** The deployment's settings an operation's requests depend on (from config, through the core). */
export interface OperationSettings {
  /** The currency of a charge whose request names none. */
  readonly defaultCurrency: string;
}

export const DEFAULT_SETTINGS: OperationSettings = { defaultCurrency: "usd" };

/** What a route hands its operation: the path parameters (already validated) and the body (already checked). */
export interface OperationInput<Body> {
  readonly params: Readonly<Record<string, string>>;
  readonly body: Body;
  /** Filled in by the core (its CoreOptions.settings); DEFAULT_SETTINGS when absent. */
  readonly settings?: OperationSettings;
}

/** What one request will write, fixed before its first try so that every resend writes the same. */
export interface Prepared<Columns extends Record<string, ColumnValue>> {
  /** The operation's columns of this request's row in the statement (`req`). */
  readonly columns: Columns;
  /** The response body stored under the key and answered (status: the operation's `status`). */
  readonly body: string;
  /**
   * Requests with the same value never share a statement (for refunds: the charge), because one
   * statement cannot update one row twice. Undefined: any requests may share one.
   */
  readonly exclusive?: string;
}

/** An expected refusal of the operation: answered as a problem, with nothing written and the key left unused. */
export interface Refusal {
  readonly problem: ProblemSpec;
  readonly detail: string;
  readonly extensions?: Record<string, unknown>;
}

/** Which statement an operation's SQL is spliced into: the ledger's single one, or phase 1 of its processor steps. */
export type Mode = "ledger" | "processor";

/**
 * The operation's SQL, CTEs spliced into the skeleton (skeleton.ts), which defines `req` (one
 * row per request: the core's columns and the operation's `columns`) and `lock (n, got)`.
 *
 * `admit` is one CTE `admit (n, refusal text, detail text, resume jsonb, answer text)` with a
 * row for every `lock` row that got its lock: refusal null to go ahead, or a reason `refuse`
 * turns into a problem (nothing is written); `resume`, what phase 1 adds to the key's recovery
 * data (the single statement ignores it); `answer`, the response body when it is made of the
 * rows the admit read (null: the request's own, Prepared.body), stored and answered as it is. A check that must hold until the commit takes its row locks
 * here (SELECT … FOR UPDATE, in a stable order). The same admit serves both statements.
 *
 * `write` is one or more CTEs (comma-separated, no trailing comma) that read `won`, the `req`
 * rows whose key row was just written, write the operation's rows, and end with
 * `events (n, aggregate_type, aggregate_id, sequence, event_type, payload)` (ledger), or with
 * `begun (n)` (phase 1: the pending rows; phase 3 writes the event).
 */
export interface OperationSql {
  readonly admit: Fragment;
  readonly write: Fragment;
}

export interface Operation<Schema extends TObject = TObject, Columns extends Record<string, ColumnValue> = Record<string, ColumnValue>> {
  /** The OpenAPI operationId. */
  readonly name: string;
  /** One line for the API reference ("Create a charge"). */
  readonly summary: string;
  readonly method: "POST";
  /** The route template ("/charges/:id/refunds"); `${method} ${path}` is the key's endpoint scope. */
  readonly path: string;
  /** Path parameters that must be UUIDs (400 invalid-id otherwise). */
  readonly uuidParams: readonly string[];
  /** The body's schema: validation and OpenAPI. */
  readonly body: Schema;
  /** The response's schema, for OpenAPI (the operation checks its bodies against it). */
  readonly response: TObject;
  /** The status of a success, the only response ever stored under a key but the processor's refusals. */
  readonly status: 200 | 201;
  /** The SQL type of each of the operation's columns, in the record type's order. */
  readonly columns: { readonly [K in keyof Columns]: SqlType };
  /** The fields that make "the same request". */
  fingerprint(input: OperationInput<Static<Schema>>): FingerprintFields;
  prepare(input: OperationInput<Static<Schema>>): Prepared<Columns>;
  /** The operation's SQL in either mode: `ledger`, the single statement; `processor`, phase 1. */
  sql(sql: Sql, mode: Mode): OperationSql;
  /** The problem for `admit`'s refusal `reason`, with its detail column. */
  refuse(reason: string, detail: string | null, input: OperationInput<Static<Schema>>): Refusal;
  /** The Location of a stored response body (a replay's); undefined: no Location header. */
  locationOf(body: string): string | undefined;
  /** Problem statuses beside the core's, for OpenAPI: status → description. */
  readonly refusals: Readonly<Record<string, string>>;
  /**
   * The problem types of the operation's own (beside lib/idempotency/problem-types.ts), under the
   * names the client's PROBLEM gives them (test/client-types.test.ts holds the two together).
   */
  readonly problems?: Readonly<Record<string, ProblemSpec>>;
  /**
   * With a payment processor (PAYMENT_PROCESSOR=stripe), the operation calls it between two
   * transactions instead of committing in one statement. Without one, or without this, the
   * single statement above is all there is.
   */
  readonly foreign?: ForeignDeclaration<Static<Schema>>;
}

/**
 * What every operation through the payment processor documents among its `refusals` (spread
 * there beside its own): the processor's outcome not known, answered with nothing stored so
 * that the client retries with the same key, and the 503 whose causes include the processor.
 */
export const PROCESSOR_REFUSALS = {
  "502": "The processor answered with an error: outcome unknown, nothing stored; retry with the same key (Retry-After)",
  "503": "Database unavailable, the token's signing keys could not be fetched, or too many requests in flight (overloaded); with a payment processor, also the processor unreachable (outcome unknown, nothing stored; retry with the same key). Retry-After",
  "504": "The processor did not answer in time: outcome unknown, nothing stored; retry with the same key (Retry-After)",
} as const;

/** The key's scope: the method and the route template, never a concrete path. */
export function endpointOf(op: Pick<Operation, "method" | "path">): string {
  return `${op.method} ${op.path}`;
}

/** The recovery data on a key (its `resume` column), as JSON. Each operation's has a schema (ForeignDeclaration.resume). */
export type Resume = Readonly<Record<string, string | number | boolean | null>>;

/** The final states a step reaches: what the processor did, never a guess. */
export type FinalOutcome = "succeeded" | "refused";

export type StepResult<R = Resume> =
  /** The step's result is recorded and the next step (`point`) runs. */
  | { readonly kind: "record"; readonly point: string; readonly resume: R }
  /** The processor's answer is final: phase 3 writes it. */
  | { readonly kind: "final"; readonly outcome: FinalOutcome; readonly resume: R }
  /** The outcome is not known: the key stays STARTED at its recovery point (with `resume`, e.g. a key's next attempt). */
  | { readonly kind: "unknown"; readonly cause: UnknownCause; readonly detail: string; readonly resume: R };

export interface StepContext<R = Resume, Caps = unknown> {
  readonly resume: R;
  /** What the operation declared it calls at the processor (its `capabilities`), and nothing else. */
  readonly processor: Caps;
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

/** Phase 3 of one key, decided before its statement: the response to store, and the operation's row. */
export interface FinalRow {
  readonly response: StoredResponse;
  /** The operation's columns of phase 3's `req` (finishSql's `columns`). */
  readonly columns: Readonly<Record<string, ColumnValue>>;
}

/**
 * Phase 3's SQL (skeleton.ts), spliced after the holder's compare-and-set, which defines `won`
 * (n, tenant, event_id, traceparent and the `columns`: the keys this statement completed).
 * `write` ends with `events (n, aggregate_type, aggregate_id, sequence, event_type, payload)`.
 */
export interface FinishSql {
  readonly columns: Readonly<Record<string, SqlType>>;
  readonly write: Fragment;
}

/** What one request of a foreign operation writes in phase 1, fixed before its first try. */
export interface ForeignPrepared<R = Resume> {
  readonly columns: Readonly<Record<string, ColumnValue>>;
  /** What the steps need, recorded on the key (the admit's `resume` column adds to it). */
  readonly resume: Partial<R>;
  /** As Prepared's: requests with the same value never share a phase 1 statement. */
  readonly exclusive?: string;
}

/**
 * An operation through the processor: phase 1 (the operation's `sql` in `processor` mode, in
 * the skeleton as the single statement), the steps from the recovery point, and phase 3.
 */
export interface ForeignDeclaration<Body, R = Resume, Caps = unknown> {
  readonly columns: Readonly<Record<string, SqlType>>;
  /** A request this mode cannot take (a body member it requires): a problem, nothing written. */
  validate(input: OperationInput<Body>): Refusal | undefined;
  prepare(input: OperationInput<Body>, traceparent: string | null): ForeignPrepared<R>;
  /** The recovery data's schema, checked whenever a key's resume is read (a failure parks the key). */
  readonly resume: TObject;
  /** The resume's ids an operator sees (`bun run ops parked`); the first is the object the key began, which `bun run ops resolve <id>` takes. */
  readonly operatorIds: readonly string[];
  /** Where an operator's resolution goes in the resume: the processor's object id, or its refusal code. */
  readonly resolution: { readonly succeeded: string; readonly refused: string };
  /** The calls the steps make, built from the processor adapter. */
  capabilities(adapter: HeldAdapter): Caps;
  /** The recovery point phase 1 writes. */
  readonly firstPoint: string;
  /** Each recovery point's step. */
  readonly steps: Readonly<Record<string, (ctx: StepContext<R, Caps>) => Promise<StepResult<R>>>>;
  /** Phase 3 as values: what the key stores and the row the operation's SQL writes. */
  final(outcome: FinalOutcome, resume: R): FinalRow;
  finishSql(sql: Sql): FinishSql;
  /** Keys whose phase 3 share this value never share a statement (the charge two refunds settle). */
  exclusive?(resume: R): string;
}

/**
 * A foreign declaration whose resume is typed `R` (its schema's Static) and whose steps call `Caps`,
 * as the generic machinery holds it. The erasure is sound because the machinery checks every
 * resume it reads against `resume` (drive.ts) before a step or phase 3 sees it, and hands the
 * steps the capabilities the same declaration built.
 */
export function foreign<Body, R, Caps>(declaration: ForeignDeclaration<Body, R, Caps>): ForeignDeclaration<Body> {
  return declaration as unknown as ForeignDeclaration<Body>;
}
