// The declaration of an idempotent operation: what differs between POST /charges and
// POST /charges/:id/refunds, and nothing else. The core (statement.ts, service.ts,
// batcher.ts) does the rest for every operation: the key's scope, the in-flight lock, the
// stored response and its replay, 409/422, time bounds, the pool gate, group commit, the
// outbox insert, metrics and logs.
import type { Static, TObject } from "@sinclair/typebox";
import type postgres from "postgres";
import type { Sql } from "../../shared/db.ts";
import type { ForeignProcess, Resume } from "../../shared/foreign/types.ts";
import type { ProblemName } from "../problem.ts";
import type { FingerprintFields } from "./fingerprint.ts";

/** A postgres.js fragment (sql`…` nested in another statement). */
export type Fragment = postgres.Fragment;

/** The SQL types an operation's own columns may have (they name the request row's record type). */
export type SqlType = "uuid" | "text" | "int" | "bigint" | "timestamptz";

/** A value of one of those columns, as JSON carries it to jsonb_to_recordset. */
export type ColumnValue = string | number | null;

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
  readonly problem: ProblemName;
  readonly detail: string;
  readonly extensions?: Record<string, unknown>;
}

/**
 * The operation's SQL, CTEs spliced into the core's statement (statement.ts), which defines:
 *  - `req`: one row per request: n, tenant, key, request_hash, response_body, event_id,
 *    traceparent, lock_id and the operation's own `columns`;
 *  - `lock (n, got)`: the rows that were not answered from a stored key, and whether their
 *    advisory lock was taken.
 *
 * `admit` must be one CTE named `admit (n, refusal text, detail text)`, with a row for every
 * `lock` row that got its lock: refusal null to go ahead, or a reason the operation's
 * `refuse` turns into a problem. Nothing is written for a refused request. A check that
 * must hold until the commit takes its row locks here (SELECT … FOR UPDATE, in a stable order).
 *
 * `write` is one or more CTEs (comma-separated, no trailing comma) that read `won`, the
 * `req` rows whose key row was just written, write the operation's rows, and end with
 * `events (n, aggregate_type, aggregate_id, sequence, event_type, payload)`: the events to
 * append, one per request. The core inserts them into the outbox.
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
  /** The status of a success, the only response ever stored under a key. */
  readonly status: 201;
  /** The SQL type of each of the operation's columns, in the record type's order. */
  readonly columns: { readonly [K in keyof Columns]: SqlType };
  /** The fields that make "the same request". */
  fingerprint(input: OperationInput<Static<Schema>>): FingerprintFields;
  prepare(input: OperationInput<Static<Schema>>): Prepared<Columns>;
  sql(sql: Sql): OperationSql;
  /** The problem for `admit`'s refusal `reason`, with its detail column. */
  refuse(reason: string, detail: string | null, input: OperationInput<Static<Schema>>): Refusal;
  /** The Location of a stored response body (a replay's). */
  locationOf(body: string): string;
  /** Problem statuses beside the core's, for OpenAPI: status → description. */
  readonly refusals: Readonly<Record<string, string>>;
  /**
   * With a payment processor (PAYMENT_PROCESSOR=stripe), the operation calls it between two
   * transactions instead of committing in one statement (core/foreign.ts). Without one, or
   * without this, the single statement above is all there is.
   */
  readonly foreign?: ForeignDeclaration<Static<Schema>>;
}

/** What one request of a foreign operation writes in phase 1, fixed before its first try. */
export interface ForeignPrepared {
  readonly columns: Readonly<Record<string, ColumnValue>>;
  /** What the steps need, recorded on the key (the admit's `resume` column adds to it). */
  readonly resume: Resume;
  /** As Prepared's: requests with the same value never share a phase 1 statement. */
  readonly exclusive?: string;
}

/**
 * Phase 1 of a foreign operation, spliced into the core's foreign statement (core/foreign.ts),
 * which defines `req` (n, tenant, key, lock_id, request_hash, resume and the `columns`),
 * `lock` and `won` as the single statement does:
 *  - `admit (n, refusal text, detail text, resume jsonb)`: as Operation's, plus what to add to
 *    the key's resume (null: nothing);
 *  - `begin`: CTEs that write the operation's pending rows for `won`, ending with `begun (n)`.
 *    No event: phase 3 writes it.
 */
export interface ForeignDeclaration<Body> {
  /** The steps and phase 3, shared with the completer (lib/shared/processor/). */
  readonly process: ForeignProcess;
  readonly columns: Readonly<Record<string, SqlType>>;
  /** A request this mode cannot take (a body member it requires): a problem, nothing written. */
  validate(input: OperationInput<Body>): Refusal | undefined;
  prepare(input: OperationInput<Body>, traceparent: string | null): ForeignPrepared;
  sql(sql: Sql): { readonly admit: Fragment; readonly begin: Fragment };
}

/** The key's scope: the method and the route template, never a concrete path. */
export function endpointOf(op: Pick<Operation, "method" | "path">): string {
  return `${op.method} ${op.path}`;
}
