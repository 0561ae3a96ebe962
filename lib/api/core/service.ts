// The Idempotency-Key contract for every operation, as values (outcome.ts): the ledger's
// single statement, or with a processor the operation's three phases (foreign.ts), both
// through one group-commit engine (group.ts) and answered by one mapping (outcome.ts).
import type { Static } from "@sinclair/typebox";
import type { Sql } from "../../shared/db.ts";
import { newEventId } from "../../events.ts";
import { UNIQUE_VIOLATION, isConnectionLost, sqlState } from "../../shared/db.ts";
import { UNBOUNDED, type PoolGate } from "../../shared/pool-gate.ts";
import { dropReadOnlyConnections, isReadOnly } from "../../shared/read-only.ts";
import { advisoryLockId, fingerprint } from "../../shared/operations/fingerprint.ts";
import { DEFAULT_SETTINGS, type Operation, type OperationInput, type OperationSettings } from "../../shared/operations/model.ts";
import { compile, findKey, runSingle, type Compiled, type KeyRow, type RequestRow } from "../../shared/operations/skeleton.ts";
import { bindForeign, keyId, runForeign, type ForeignBinding, type ForeignOptions, type ForeignRuntime } from "./foreign.ts";
import { createGroupCommit, type GroupCommit, type GroupOptions, type GroupStatement, type StatementStats } from "./group.ts";
import { fromUnwritten, type Outcome } from "./outcome.ts";

export { OUTCOME_KINDS, type Outcome, type OutcomeKind } from "./outcome.ts";

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
  /** Deployment settings handed to every operation (the default currency). */
  readonly settings?: OperationSettings;
  /**
   * A payment processor (PAYMENT_PROCESSOR=stripe): operations that declare `foreign` call it
   * in three phases (foreign.ts). Without it every operation is its single statement.
   */
  readonly foreign?: ForeignOptions;
  /** Group commit of the single statement under load (group.ts); without it, each is sent at once. */
  readonly batching?: Omit<GroupOptions, "slot">;
  /** Group commit of the processor phases' statements, as `batching`'s for the single statement. */
  readonly groupCommit?: Omit<GroupOptions, "slot">;
}

export interface IdempotencyCore {
  run<Op extends Operation>(op: Op, request: OperationRequest<Static<Op["body"]>>): Promise<Outcome>;
  /** A read of the routes (GET), within the same pool gate and deadline as the writes. */
  read<T>(work: (sql: Sql, endsAt: number) => Promise<T>): Promise<T>;
  /** What the routes hand every operation in its input. */
  readonly settings: OperationSettings;
  /** The group commit's totals, for the metrics. */
  readonly statements: StatementStats;
}

/** One ledger request as the group takes it. */
interface LedgerItem {
  readonly row: RequestRow;
  /** Prepared.exclusive: requests with the same value never share a statement. */
  readonly exclusive: string | undefined;
}

// A pooled connection whose backend was killed fails the statement sent on it (and, with
// postgres.js, sometimes the next one too). Sending the statement again on a fresh
// connection is safe: it is atomic and keyed, and every try writes the same row, so a
// resend that finds a key row of a try that did commit knows it as its own.
const MAX_RESENDS = 2;
const AT_ONCE: Omit<GroupOptions, "slot"> = { maxInFlight: Number.POSITIVE_INFINITY, maxBatch: 1, statementTimeoutMs: 0 };

export function createIdempotencyCore(sql: Sql, options: CoreOptions): IdempotencyCore {
  const settings = options.settings ?? DEFAULT_SETTINGS;
  const foreign = options.foreign;
  const deadline = () => options.bounds?.deadline() ?? UNBOUNDED;
  // A ledger request holds its gate slot while it queues; with a processor a statement takes one when sent.
  const slot = <T>(work: (endsAt: number) => Promise<T>): Promise<T> => deadline().run(work);
  const group = createGroupCommit(options.batching ?? AT_ONCE);
  const runtime: ForeignRuntime = { group: createGroupCommit({ ...(options.groupCommit ?? AT_ONCE), slot }), stepEndsAt: () => deadline().endsAt };
  const ledger = new Map<Operation, { c: Compiled; statement: GroupStatement<LedgerItem, KeyRow> }>();
  const bound = new Map<Operation, ForeignBinding>();
  const ledgerOf = (op: Operation) => {
    let l = ledger.get(op);
    if (l === undefined) {
      const c = compile(sql, op, "ledger");
      const statement: GroupStatement<LedgerItem, KeyRow> = {
        send: (items, endsAt) => runSingle(sql, c, options.ttlSeconds, items.map((item, n) => ({ n, ...item.row })), endsAt),
        // Read only when requests queue: the quiet path builds no strings.
        conflicts: ({ row, exclusive }) => {
          const id = keyId({ tenant: row.tenant as string, key: row.key as string, endpoint: c.endpoint });
          return exclusive === undefined ? [id] : [id, `x:${exclusive}`];
        },
      };
      ledger.set(op, (l = { c, statement }));
    }
    return l;
  };
  const throughProcessor = async (op: Operation, request: OperationRequest<Static<Operation["body"]>>, endpointKey: { lockId: string; requestHash: string }): Promise<Outcome> => {
    let b = bound.get(op);
    if (b === undefined) bound.set(op, (b = bindForeign(sql, op, runtime, { ttlSeconds: options.ttlSeconds, leaseMs: foreign!.leaseMs })));
    const d = deadline();
    const outcome = await runForeign(sql, b, { ...request, ...endpointKey }, { ...foreign!, gate: (work) => d.run(work), endsAt: d.endsAt, runtime });
    if (outcome.kind === "created" || outcome.kind === "stored_problem") options.onCreated?.();
    return outcome;
  };
  return {
    async run(op, request) {
      // The route put the core's settings in the input (no object more per request here).
      const input: OperationInput<Static<Operation["body"]>> = request.input;
      const { c, statement } = ledgerOf(op);
      const requestHash = fingerprint(op.fingerprint(input));
      const lockId = advisoryLockId(request.tenant, request.key, c.endpoint);
      if (foreign !== undefined && op.foreign !== undefined) return throughProcessor(op, request, { lockId, requestHash });
      const prepared = op.prepare(input);
      const item: LedgerItem = {
        row: {
          tenant: request.tenant,
          key: request.key,
          lock_id: lockId,
          request_hash: requestHash,
          response_body: prepared.body,
          event_id: newEventId(),
          traceparent: request.traceparent,
          ...prepared.columns,
        },
        exclusive: prepared.exclusive,
      };
      const d = deadline();
      let outcome: Outcome | undefined;
      // The loop is here rather than in a function of its own: an async frame costs a promise per request.
      for (let resends = 0; outcome === undefined; resends++) {
        try {
          // Each try waits for a slot of the pool and starts only within the request's deadline.
          outcome = await d.run((endsAt) => attempt(sql, c, statement, group, item, requestHash, prepared.body, input, endsAt));
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
      return deadline().run((endsAt) => work(sql, endsAt));
    },
    settings,
    statements: {
      get statements() {
        return group.statements + runtime.group.statements;
      },
      get requests() {
        return group.requests + runtime.group.requests;
      },
      get queued() {
        return group.queued + runtime.group.queued;
      },
    },
  };
}

async function attempt(
  sql: Sql,
  c: Compiled,
  statement: GroupStatement<LedgerItem, KeyRow>,
  group: GroupCommit,
  item: LedgerItem,
  requestHash: string,
  body: string,
  input: OperationInput<Static<Operation["body"]>>,
  endsAt: number,
): Promise<Outcome> {
  let row: KeyRow;
  try {
    row = await group.run(statement, item, endsAt);
  } catch (error) {
    // The unique constraint is the safety net under the advisory lock: whoever hits it
    // lost a race with a request for the same key, which is by definition in flight.
    if (sqlState(error) === UNIQUE_VIOLATION) return { kind: "in_flight" };
    throw error;
  }
  if (row.created === 1) {
    const answer = row.answer ?? body;
    return { kind: "created", status: c.op.status, body: answer, location: c.op.locationOf(answer) };
  }
  // This request's own earlier try may have committed before its connection was lost (its
  // body holds the ids this request drew): still the creation, answered and counted as one.
  const answer = await fromUnwritten(c.op, row, requestHash, () => findKey(sql, item.row.tenant as string, item.row.key as string, c.endpoint, endsAt), (reason, detail) => c.op.refuse(reason, detail, input), body);
  return answer === "started" ? { kind: "in_flight" } : answer;
}
