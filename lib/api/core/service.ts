// The Idempotency-Key contract for every operation, as values: expected outcomes are a
// discriminated union; only bugs and infrastructure faults throw.
import type { Static } from "@sinclair/typebox";
import type { Sql } from "../../shared/db.ts";
import { newEventId } from "../../events.ts";
import { UNIQUE_VIOLATION, isConnectionLost, sqlState } from "../../shared/db.ts";
import { UNBOUNDED, type PoolGate } from "../../shared/pool-gate.ts";
import { dropReadOnlyConnections, isReadOnly } from "../../shared/read-only.ts";
import type { Batcher, StatementStats } from "./batcher.ts";
import { advisoryLockId, fingerprint } from "./fingerprint.ts";
import { compileForeign, runForeign, type ForeignOptions, type ForeignOutcome, type ForeignRuntime } from "./foreign.ts";
import { createGroupCommit, type GroupOptions } from "./group.ts";
import { DEFAULT_SETTINGS, type Operation, type OperationInput, type OperationSettings } from "./operation.ts";
import { compileOperation, findKey, runOperation, type CompiledOperation, type KeyRow, type RequestRow } from "./statement.ts";

/** Every answer of the core; a foreign operation's (core/foreign.ts) include the single statement's. */
export type Outcome = ForeignOutcome;

export type OutcomeKind = Outcome["kind"];

// Every kind, for the counters that start at zero: a Record, so a new kind fails to compile until named here.
const OUTCOME_KIND_SET: Readonly<Record<OutcomeKind, true>> = {
  created: true,
  replayed: true,
  payload_conflict: true,
  in_flight: true,
  refused: true,
  stored_problem: true,
  unknown_outcome: true,
};
export const OUTCOME_KINDS = Object.keys(OUTCOME_KIND_SET) as readonly OutcomeKind[];

export interface OperationRequest<Body> {
  /** Whose key and rows these are: every read and write is scoped to it. */
  readonly tenant: string;
  readonly key: string;
  readonly input: OperationInput<Body>;
  readonly traceparent: string | null;
}

export interface CoreOptions {
  readonly ttlSeconds: number;
  /** Called after an operation committed its event; the relay's wake-up hangs here. */
  readonly onCreated?: () => void;
  /** The pool wait and request deadline; without it, statements are sent at once. */
  readonly bounds?: PoolGate;
  /** Group commit under load (batcher.ts); without it, each request is its own statement. */
  readonly batcher?: Batcher;
  /** Deployment settings handed to every operation (the default currency). */
  readonly settings?: OperationSettings;
  /**
   * A payment processor (PAYMENT_PROCESSOR=stripe): operations that declare `foreign` call it
   * in three phases (core/foreign.ts). Without it every operation is its single statement.
   */
  readonly foreign?: ForeignOptions;
  /**
   * Group commit of the foreign operations' statements under load (group.ts), as `batcher`'s
   * for the single statement; without it, each statement is sent at once.
   */
  readonly groupCommit?: GroupOptions;
}

export interface IdempotencyCore {
  run<Op extends Operation>(op: Op, request: OperationRequest<Static<Op["body"]>>): Promise<Outcome>;
  /** A read of the routes (GET), within the same pool gate and deadline as the writes. */
  read<T>(work: (sql: Sql, endsAt: number) => Promise<T>): Promise<T>;
  /** What the routes hand every operation in its input. */
  readonly settings: OperationSettings;
  /** The foreign operations' grouped statements (group.ts): their totals, for the metrics. */
  readonly foreignStatements: StatementStats;
}

type AnyInput = OperationInput<Static<Operation["body"]>>;

// A pooled connection whose backend was killed fails the statement sent on it (and, with
// postgres.js, sometimes the next one too). Sending the statement again on a fresh
// connection is safe: it is atomic and keyed, and every try writes the same row, so a
// resend that finds a key row of a try that did commit knows it as its own.
const MAX_RESENDS = 2;

export function createIdempotencyCore(sql: Sql, options: CoreOptions): IdempotencyCore {
  const compiled = new Map<Operation, CompiledOperation>();
  const compiledOf = (op: Operation): CompiledOperation => {
    let c = compiled.get(op);
    if (c === undefined) compiled.set(op, (c = compileOperation(sql, op)));
    return c;
  };
  const settings = options.settings ?? DEFAULT_SETTINGS;
  const foreign = options.foreign;
  const compiledForeign = new Map<Operation, ReturnType<typeof compileForeign>>();
  const slot = <T>(work: (endsAt: number) => Promise<T>): Promise<T> => (options.bounds?.deadline() ?? UNBOUNDED).run(work);
  const runtime: ForeignRuntime = {
    group: createGroupCommit({ ...(options.groupCommit ?? { maxInFlight: Number.POSITIVE_INFINITY, maxBatch: 1, statementTimeoutMs: 0 }), slot }),
    stepEndsAt: () => (options.bounds?.deadline() ?? UNBOUNDED).endsAt,
  };
  const runThroughProcessor = async (op: Operation, request: OperationRequest<Static<Operation["body"]>>, input: AnyInput): Promise<Outcome> => {
    const declaration = op.foreign!;
    let c = compiledForeign.get(op);
    if (c === undefined) compiledForeign.set(op, (c = compileForeign(sql, op, declaration, runtime, foreign!.leaseMs)));
    const endpoint = c.endpoint;
    const deadline = options.bounds?.deadline() ?? UNBOUNDED;
    const outcome = await runForeign(
      sql,
      c,
      { tenant: request.tenant, key: request.key, lockId: advisoryLockId(request.tenant, request.key, endpoint), requestHash: fingerprint(op.fingerprint(input)), input, traceparent: request.traceparent },
      { ...foreign!, ttlSeconds: options.ttlSeconds, gate: (work) => deadline.run(work), endsAt: deadline.endsAt, runtime },
    );
    if (outcome.kind === "created" || outcome.kind === "stored_problem") options.onCreated?.();
    return outcome;
  };
  return {
    async run(op, request) {
      // The route put the core's settings in the input (no object more per request here).
      const input: AnyInput = request.input;
      if (foreign !== undefined && op.foreign !== undefined) return runThroughProcessor(op, request, input);
      const deadline = options.bounds?.deadline() ?? UNBOUNDED;
      const c = compiledOf(op);
      const prepared = op.prepare(input);
      const row: RequestRow = {
        tenant: request.tenant,
        key: request.key,
        lockId: advisoryLockId(request.tenant, request.key, c.endpoint),
        requestHash: fingerprint(op.fingerprint(input)),
        responseBody: prepared.body,
        eventId: newEventId(),
        traceparent: request.traceparent,
        columns: prepared.columns,
      };
      let outcome: Outcome | undefined;
      // The loop is here rather than in a function of its own: an async frame costs a promise per request.
      for (let resends = 0; outcome === undefined; resends++) {
        try {
          // Each try waits for a slot of the pool and starts only within the request's deadline.
          outcome = await deadline.run((endsAt) => attempt(sql, options, c, row, prepared.exclusive, input, endsAt));
        } catch (error) {
          // A server gone read-only (a failover): answered 503, and the pool leaves it.
          if (isReadOnly(error)) void dropReadOnlyConnections(sql);
          if (resends >= MAX_RESENDS || !isConnectionLost(error)) throw error;
        }
      }
      if (outcome.kind === "created") options.onCreated?.();
      return outcome;
    },
    read(work) {
      return (options.bounds?.deadline() ?? UNBOUNDED).run((endsAt) => work(sql, endsAt));
    },
    settings,
    foreignStatements: runtime.group,
  };
}

async function attempt(
  sql: Sql,
  options: CoreOptions,
  c: CompiledOperation,
  row: RequestRow,
  exclusive: string | undefined,
  input: OperationInput<Static<Operation["body"]>>,
  endsAt: number,
): Promise<Outcome> {
  let answer: KeyRow;
  try {
    answer = options.batcher
      ? await options.batcher.run({ operation: c, row, exclusive }, endsAt)
      : (await runOperation(sql, c, options.ttlSeconds, [row], endsAt))[0]!;
  } catch (error) {
    // The unique constraint is the safety net under the advisory lock: whoever hits it
    // lost a race with a request for the same key, which is by definition in flight.
    if (sqlState(error) === UNIQUE_VIOLATION) return { kind: "in_flight" };
    throw error;
  }
  if (answer.created === 1) return { kind: "created", status: c.op.status, body: row.responseBody, location: c.op.locationOf(row.responseBody) };
  if (answer.request_hash !== null) return fromStored(c, answer, row);
  if (answer.got === false) return { kind: "in_flight" };
  // Refused, or locked but not written: both decided on this statement's snapshot, which can
  // predate the commit of another request for the same key (whose lock, released at that
  // commit, this one then took). What that request stored is the answer, not a refusal it made
  // false (one more round trip, these cases only); with nothing stored, the refusal stands, or
  // the key is in flight.
  const stored = await findKey(sql, row.tenant, row.key, c.endpoint, endsAt);
  if (stored) return fromStored(c, stored, row);
  return answer.refusal !== null ? { kind: "refused", refusal: c.op.refuse(answer.refusal, answer.detail, input) } : { kind: "in_flight" };
}

function fromStored(c: CompiledOperation, stored: KeyRow, row: RequestRow): Outcome {
  if (stored.request_hash !== row.requestHash) return { kind: "payload_conflict" };
  if (stored.status !== "COMPLETED" || stored.response_status === null || stored.response_body === null) {
    return { kind: "in_flight" };
  }
  const body = stored.response_body;
  // This request's own earlier try committed before its connection was lost (its body holds
  // the ids this request drew): still the creation, answered, counted and followed by a
  // wake-up as one.
  const kind = body === row.responseBody ? "created" : "replayed";
  return { kind, status: stored.response_status, body, location: c.op.locationOf(body) };
}
