// The model of an idempotent operation: a ledger operation is one statement; one with a
// `foreign` part runs as phase 1, its processor steps and phase 3. The engine names no operation.
import type { Static, TObject } from "@sinclair/typebox";
import type postgres from "postgres";
import type { Sql } from "../platform/db.ts";
import type { ProblemSpec } from "./problem-types.ts";
import type { FingerprintFields } from "./keys.ts";

export type Fragment = postgres.Fragment;

export const SQL_TYPES = ["uuid", "text", "int", "bigint", "boolean", "jsonb", "timestamptz"] as const;
export type SqlType = (typeof SQL_TYPES)[number];

export type ColumnValue = string | number | boolean | null;

export const DEFAULT_SETTINGS: Readonly<{ defaultCurrency: string }> = { defaultCurrency: "usd" };
export type OperationSettings = typeof DEFAULT_SETTINGS;

/** What a route hands its operation: the path parameters and the body, both already checked. */
export interface OperationInput<Body> {
  readonly params: Readonly<Record<string, string>>;
  readonly body: Body;
  readonly settings?: OperationSettings;
}

/** What one request will write, fixed before its first try so that every resend writes the same. */
export interface Prepared<Columns extends Record<string, ColumnValue>> {
  readonly columns: Columns;
  /** The response body stored under the key and answered. */
  readonly body: string;
  /** Requests with the same value never share a statement: it cannot update one row twice. */
  readonly exclusive?: string;
}

/** An expected refusal: answered as a problem, nothing written, the key left unused. */
export interface Refusal {
  readonly problem: ProblemSpec;
  readonly detail: string;
  readonly extensions?: Record<string, unknown>;
}

export type Mode = "ledger" | "processor";

/** The operation's CTEs, spliced into skeleton.ts after `req` (a row per request) and `lock (n, got)`. */
export interface OperationSql {
  /**
   * `admit (n, refusal, detail, resume jsonb, answer)`, a row per locked request: refusal null to go
   * ahead. A check that must hold until the commit takes its row locks here, in a stable order.
   */
  readonly admit: Fragment;
  /** Reads `won` (the rows whose key was written); ends with `events (…)` (ledger) or `begun (n)`. */
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
  readonly response: TObject;
  /** A success's status: the only one ever stored under a key, but the processor's refusals. */
  readonly status: 200 | 201;
  readonly columns: { readonly [K in keyof Columns]: SqlType };
  fingerprint(input: OperationInput<Static<Schema>>): FingerprintFields;
  prepare(input: OperationInput<Static<Schema>>): Prepared<Columns>;
  sql(sql: Sql, mode: Mode): OperationSql;
  refuse(reason: string, detail: string | null, input: OperationInput<Static<Schema>>): Refusal;
  /** The Location of a stored response body; undefined: no Location header. */
  locationOf(body: string): string | undefined;
  /** Problem statuses beside the core's, for OpenAPI: status → description. */
  readonly refusals: Readonly<Record<string, string>>;
  /** The operation's own problem types, by the client's PROBLEM names. */
  readonly problems?: Readonly<Record<string, ProblemSpec>>;
  /** With a payment processor: two transactions around its calls instead of one statement. */
  readonly foreign?: ForeignDeclaration<Static<Schema>>;
}

type ForeignPrepared<R> = Omit<Prepared<Record<string, ColumnValue>>, "body"> & {
  readonly resume: Partial<R>;
};

/** What every operation through the processor documents among its `refusals`. */
export const PROCESSOR_REFUSALS = {
  "502": "The processor answered with an error: outcome unknown, nothing stored; retry with the same key (Retry-After)",
  "503": "Database unavailable, the token's signing keys could not be fetched, or too many requests in flight (overloaded); with a payment processor, also the processor unreachable (outcome unknown, nothing stored; retry with the same key). Retry-After",
  "504": "The processor did not answer in time: outcome unknown, nothing stored; retry with the same key (Retry-After)",
} as const;

/** The key's scope: the route template, never a concrete path. */
export function endpointOf(op: Pick<Operation, "method" | "path">): string {
  return `${op.method} ${op.path}`;
}

/** The recovery data on a key (its `resume` column). */
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
  /** A takeover's first step: the earlier holder may have called the processor unrecorded, so read first. */
  readonly resumed: boolean;
}

export type StoredResponse = Readonly<{ status: number; body: string }>;

/** Phase 3 of one key: the response to store, and the operation's row. */
export interface FinalRow {
  readonly response: StoredResponse;
  readonly columns: Readonly<Record<string, ColumnValue>>;
}

/** Phase 3's CTEs, after the holder's compare-and-set defines `won`; `write` ends with `events`. */
export type FinishSql = Pick<OperationSql, "write"> & { readonly columns: Readonly<Record<string, SqlType>> };

/** An operation through the processor: phase 1 (`sql` in `processor` mode), its steps, phase 3. */
export interface ForeignDeclaration<Body, R = Resume, Caps = unknown> {
  readonly columns: Readonly<Record<string, SqlType>>;
  /** A request this mode cannot take (a body member it requires). */
  validate(input: OperationInput<Body>): Refusal | undefined;
  /** Phase 1's row; `resume` is what the steps need (the admit's `resume` adds to it). */
  prepare(input: OperationInput<Body>, traceparent: string | null): ForeignPrepared<R>;
  /** The recovery data's schema, checked whenever a key's resume is read (a failure parks the key). */
  readonly resume: TObject;
  /** The resume's ids an operator sees; the first is what `ops resolve` takes. */
  readonly operatorIds: readonly string[];
  /** The resume's fields an operator's resolution fills: the processor's object id, or its refusal code. */
  readonly resolution: { readonly succeeded: string; readonly refused: string };
  capabilities(adapter: HeldAdapter): Caps;
  readonly firstPoint: string;
  readonly steps: Readonly<Record<string, (ctx: StepContext<R, Caps>) => Promise<StepResult<R>>>>;
  final(outcome: FinalOutcome, resume: R): FinalRow;
  finishSql(sql: Sql): FinishSql;
  /** Keys whose phase 3 share this value never share a statement. */
  exclusive?(resume: R): string;
}

/** A typed declaration as the engine holds it: sound, as drive.ts checks every resume against `resume`. */
export function foreign<Body, R, Caps>(declaration: ForeignDeclaration<Body, R, Caps>): ForeignDeclaration<Body> {
  return declaration as unknown as ForeignDeclaration<Body>;
}

// The service the steps call (a payment processor): every call answered as a value, so that the
// steps can record what is known; UnknownCause says why nobody knows what it did.
export type UnknownCause = "processor_error" | "unreachable" | "timeout" | "processing";

export type CallResult<T> =
  | { readonly kind: "ok"; readonly value: T }
  /** A final answer of the processor: a decline, or a request it will never accept. */
  | { readonly kind: "refused"; readonly status: number; readonly code: string; readonly declineCode: string | null; readonly message: string }
  /**
   * The processor may or may not have acted. finished: the API itself answered a 5xx it keeps under
   * the key (not Stripe-Should-Retry), so whatever it did is in its objects now.
   */
  | { readonly kind: "unknown"; readonly cause: UnknownCause; readonly detail: string; readonly status: number | null; readonly finished: boolean };

/** One call of the client `Api`, as a value; each operation builds its steps' calls from it. */
export interface ForeignAdapter<Api> {
  call<T>(method: "GET" | "POST", request: (api: Api) => Promise<T>): Promise<CallResult<T>>;
}

/** A call's value mapped, its refusal or unknown outcome kept. */
export async function mapCall<T, V>(call: Promise<CallResult<T>>, view: (value: T) => V): Promise<CallResult<V>> {
  const result = await call;
  return result.kind === "ok" ? { kind: "ok", value: view(result.value) } : result;
}

/** An adapter as the engine holds it: handed to the operations, read here by nothing. */
export type HeldAdapter = object;
