// The Idempotency-Key contract for every operation, as values (outcome.ts): the ledger's
// single statement, or with a processor the operation's three phases (foreign.ts), both
// through one group-commit engine (group.ts) and answered by one mapping (outcome.ts).
import type { Static } from "@sinclair/typebox";
import type { Sql } from "../platform/db.ts";
import { newEventId } from "../platform/uuid.ts";
import { UNIQUE_VIOLATION, isConnectionLost, sqlState } from "../platform/db.ts";
import { UNBOUNDED, type PoolGate } from "../platform/pool-gate.ts";
import { dropReadOnlyConnections, isReadOnly } from "../platform/read-only.ts";
import { advisoryLockId, fingerprint } from "./fingerprint.ts";
import { DEFAULT_SETTINGS, endpointOf, type Operation, type OperationInput, type OperationSettings } from "./model.ts";
import { compile, findKey, runSingle, type Compiled, type KeyRow, type RequestRow } from "./skeleton.ts";
import { bindForeign, keyId, runForeign, type ForeignBinding, type ForeignOptions, type ForeignRuntime } from "./foreign.ts";
import { createGroupCommit, type GroupCommit, type GroupOptions, type GroupStatement, type StatementStats } from "./group-commit.ts";
import { fromUnwritten, type Outcome } from "./outcome.ts";
import { createKeyWaits } from "./waits.ts";

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
  /**
   * Hears completions in other processes (a LISTEN on the relay's channel, which every commit
   * with an event notifies): resolves once listening. Without it (the edge worker) a request
   * never waits for a key in flight: Prefer: wait is ignored.
   */
  readonly listen?: (onNotify: () => void) => Promise<unknown>;
}

export interface IdempotencyCore {
  run<Op extends Operation>(op: Op, request: OperationRequest<Static<Op["body"]>>): Promise<Outcome>;
  /**
   * `run`, and while the key is in flight, held up to `waitSeconds` (capped by the request's
   * deadline) for its holder's outcome (Prefer: wait). `waited`: it was in flight and held, so
   * the preference was applied (the answer says so, whatever it is).
   */
  runWaiting<Op extends Operation>(op: Op, request: OperationRequest<Static<Op["body"]>>, waitSeconds: number): Promise<{ outcome: Outcome; waitedSeconds: number | undefined }>;
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
// A held request reads its key once more after its wait: this much of its deadline is kept for that.
const WAIT_MARGIN_MS = 1000;
const MS_PER_S = 1000;

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
  const waits = createKeyWaits();
  let listening: Promise<unknown> | undefined;
  const keyOf = (request: { tenant: string; key: string }, endpoint: string) => keyId({ tenant: request.tenant, key: request.key, endpoint });
  const throughProcessor = async (op: Operation, request: OperationRequest<Static<Operation["body"]>>, endpointKey: { lockId: string; requestHash: string }): Promise<Outcome> => {
    let b = bound.get(op);
    if (b === undefined) bound.set(op, (b = bindForeign(sql, op, runtime, { ttlSeconds: options.ttlSeconds, leaseMs: foreign!.leaseMs })));
    const d = deadline();
    let outcome: Outcome | undefined;
    try {
      outcome = await runForeign(sql, b, { ...request, ...endpointKey }, { ...foreign!, gate: (work) => d.run(work), endsAt: d.endsAt, runtime });
      if (outcome.kind === "created" || outcome.kind === "stored_problem") options.onCreated?.();
      return outcome;
    } finally {
      // This request held the key (an in_flight answer never did, and must not wake its own
      // wait): whoever waits for it here reads it again.
      if (waits.size > 0 && outcome?.kind !== "in_flight") waits.wake(keyOf(request, b.c.endpoint));
    }
  };
  const core: IdempotencyCore = {
    async runWaiting(op, request, waitSeconds) {
      const started = performance.now();
      let outcome = await core.run(op, request);
      if (outcome.kind !== "in_flight" || waitSeconds <= 0 || options.listen === undefined) return { outcome, waitedSeconds: undefined };
      // Capped by the request's deadline, less the last read of the key.
      const capMs = deadline().endsAt - WAIT_MARGIN_MS - started;
      const appliedSeconds = waitSeconds * MS_PER_S <= capMs ? waitSeconds : Math.floor(capMs / MS_PER_S);
      if (appliedSeconds <= 0) return { outcome, waitedSeconds: undefined };
      const endsAt = started + appliedSeconds * MS_PER_S;
      // Listening before the key is read again, so that a completion in between is heard.
      listening ??= options.listen(() => waits.wakeAll()).catch((error: unknown) => {
        listening = undefined;
        throw error;
      });
      await listening;
      const id = keyOf(request, endpointOf(op));
      for (;;) {
        const held = waits.wait(id, endsAt);
        outcome = await core.run(op, request);
        if (outcome.kind !== "in_flight" || performance.now() >= endsAt) {
          held.cancel();
          break;
        }
        await held.woken;
      }
      return { outcome, waitedSeconds: appliedSeconds };
    },
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
      if (waits.size > 0 && outcome.kind !== "in_flight") waits.wake(keyOf(request, c.endpoint));
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
  return core;
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
