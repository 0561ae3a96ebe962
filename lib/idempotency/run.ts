// The one function that runs every idempotent operation: the claim (the ledger's whole operation,
// or phase 1 writing the key STARTED under a lease), then with a processor the steps and phase 3
// by the lease's holder, and the outcome as a value (outcome.ts).
import type { Static } from "@sinclair/typebox";
import { UNIQUE_VIOLATION, isConnectionLost, sqlState, type Sql } from "../platform/db.ts";
import { newEventId } from "../platform/uuid.ts";
import { UNBOUNDED, type Deadline, type PoolGate } from "../platform/pool-gate.ts";
import { dropReadOnlyConnections, isReadOnly } from "../platform/read-only.ts";
import { endSpan, tracingOn, transactionSpan } from "../platform/trace-context.ts";
import { advisoryLockId, fingerprint, keyId } from "./keys.ts";
import { DEFAULT_SETTINGS, endpointOf, type Operation, type OperationInput, type OperationSettings } from "./model.ts";
import { compile, findKey, runClaim, type Compiled, type KeyRow, type RequestRow } from "./skeleton.ts";
import { AT_ONCE, createGroupCommit, type GroupOptions, type GroupStatement, type StatementStats } from "./group-commit.ts";
import { drive, type DriveOptions } from "./drive.ts";
import { groupedWrites, takeLease } from "./lease.ts";
import { IN_FLIGHT, createdOf, fromDrive, fromStored, fromUnwritten, type Outcome } from "./outcome.ts";
import { createKeyWaits } from "./waits.ts";

export interface OperationRequest<Body> {
  /** Every read and write is scoped to it. */
  readonly tenant: string;
  readonly key: string;
  readonly input: OperationInput<Body>;
  readonly traceparent: string | null;
}

export type ForeignOptions = Omit<DriveOptions, "writes">;

export interface CoreOptions {
  readonly ttlSeconds: number;
  /** Called after an operation committed its event: the relay's wake-up. */
  readonly onCreated?: () => void;
  /** The pool wait and request deadline; without it, statements are sent at once. */
  readonly bounds?: PoolGate;
  readonly settings?: OperationSettings;
  /** A payment processor: operations that declare `foreign` call it. */
  readonly foreign?: ForeignOptions;
  /** Group commit of the ledger's claims; without it, each is sent at once. */
  readonly batching?: Omit<GroupOptions, "slot">;
  /** Group commit of the processor phases' statements. */
  readonly groupCommit?: Omit<GroupOptions, "slot">;
  /**
   * Hears completions in other processes (a LISTEN on the relay's channel): resolves once
   * listening. Without it (the edge worker) Prefer: wait is ignored.
   */
  readonly listen?: (onNotify: () => void) => Promise<unknown>;
}

export interface IdempotencyCore {
  run<Op extends Operation>(op: Op, request: OperationRequest<Static<Op["body"]>>): Promise<Outcome>;
  /**
   * `run`, and while the key is in flight, held up to `waitSeconds` (capped by the deadline) for
   * its holder's outcome (Prefer: wait). `waitedSeconds`: the preference was applied.
   */
  runWaiting<Op extends Operation>(op: Op, request: OperationRequest<Static<Op["body"]>>, waitSeconds: number): Promise<{ outcome: Outcome; waitedSeconds: number | undefined }>;
  /** A read of the routes (GET), within the same pool gate and deadline as the writes. */
  read<T>(work: (sql: Sql, endsAt: number) => Promise<T>): Promise<T>;
  readonly settings: OperationSettings;
  readonly statements: StatementStats;
}

/** One request's claim, fixed before its first try so that every resend writes the same row. */
interface Claim {
  readonly row: RequestRow;
  readonly exclusive: string | undefined;
  /** The ledger's answer as this request stores it (so its own earlier try's reads as created). */
  readonly body: string | undefined;
  /** Phase 1's lease token. */
  readonly token: string | undefined;
}

/** An operation bound to this engine, built once. */
interface Binding {
  readonly c: Compiled;
  readonly claim: GroupStatement<Claim, KeyRow>;
  /** undefined: the ledger, no steps. */
  readonly steps: DriveOptions | undefined;
}

type Input = OperationInput<Static<Operation["body"]>>;

// A pooled connection whose backend was killed fails the statement sent on it (with postgres.js,
// sometimes the next one too). The ledger's claim is resent: it is atomic and every try writes
// the same row, so a resend that finds its own committed try knows it. Not phase 1: its lease
// would answer its own resend 409.
const MAX_RESENDS = 2;
// A held request reads its key once more after its wait: this much of its deadline is kept for that.
const WAIT_MARGIN_MS = 1000;
const MS_PER_S = 1000;
// A claim that hit the unique constraint lost a race for the same key: in flight.
const LOST_RACE: KeyRow = { got: false, created: 0, refusal: null, detail: null, request_hash: null, status: null, response_status: null, response_body: null };

export function createIdempotencyCore(sql: Sql, options: CoreOptions): IdempotencyCore {
  const settings = options.settings ?? DEFAULT_SETTINGS;
  const foreign = options.foreign;
  const terms = { ttlSeconds: options.ttlSeconds, leaseMs: foreign?.leaseMs ?? 0 };
  const deadline = (): Deadline => options.bounds?.deadline() ?? UNBOUNDED;
  // A ledger claim holds its gate slot while it queues (its batch is at most the pool); phase 1
  // and the steps' writes take one when sent, so a request waiting for the processor holds none.
  const ledger = createGroupCommit(options.batching ?? AT_ONCE);
  const steps = createGroupCommit({ ...(options.groupCommit ?? AT_ONCE), slot: (work) => deadline().run(work) });
  const bindings = new Map<Operation, Binding>();
  const bind = (op: Operation): Binding => {
    const mode = foreign !== undefined && op.foreign !== undefined ? "processor" : "ledger";
    const c = compile(sql, op, mode);
    const claim: GroupStatement<Claim, KeyRow> = {
      send: (claims, endsAt) => runClaim(sql, c, terms, claims.map((k, n) => ({ n, ...k.row })), endsAt),
      // Read only when requests queue: the quiet path builds no strings.
      conflicts: ({ row, exclusive }) => {
        const id = keyId(row.tenant as string, row.key as string, c.endpoint);
        return exclusive === undefined ? [id] : [id, `x:${exclusive}`];
      },
    };
    const writes = mode === "processor" ? groupedWrites(sql, op, foreign!.leaseMs, steps, () => deadline().endsAt) : undefined;
    return { c, claim, steps: writes && { ...foreign!, writes } };
  };
  const waits = createKeyWaits();
  let listening: Promise<unknown> | undefined;

  /** The claim's answer when it wrote nothing: a stored answer, a refusal, a 409, or a key to take over. */
  const unwritten = async (b: Binding, request: OperationRequest<unknown>, row: KeyRow, requestHash: string, claim: Claim, d: Deadline): Promise<Outcome> => {
    const { op, endpoint } = b.c;
    const findNow = () => d.run((endsAt) => findKey(sql, request.tenant, request.key, endpoint, endsAt));
    const answer = await fromUnwritten(op, row, requestHash, findNow, (reason, detail) => op.refuse(reason, detail, request.input as Input), claim.body);
    if (answer !== "started" || b.steps === undefined) return answer === "started" ? IN_FLIGHT : answer;
    // STARTED, its lease expired: its holder is gone or gave up on an unknown outcome.
    const held = await d.run((endsAt) => takeLease(sql, { tenant: request.tenant, key: request.key, endpoint }, b.steps!.leaseMs, endsAt));
    if (held === undefined) return IN_FLIGHT;
    return fromDrive(op, await drive(sql, op, held, true, b.steps));
  };

  /** A request phase 1 cannot take is refused, but a key completed before still replays. */
  const invalidOrStored = async (b: Binding, request: OperationRequest<unknown>, requestHash: string, d: Deadline): Promise<Outcome | undefined> => {
    const invalid = b.c.op.foreign!.validate(request.input as Input);
    if (invalid === undefined) return undefined;
    const stored = await d.run((endsAt) => findKey(sql, request.tenant, request.key, b.c.endpoint, endsAt));
    const answer = stored?.status === "COMPLETED" ? fromStored(b.c.op, stored, requestHash) : undefined;
    return answer !== undefined && answer !== "started" && answer.kind !== "payload_conflict" ? answer : { kind: "refused", refusal: invalid };
  };

  const core: IdempotencyCore = {
    async run(op, request) {
      let b = bindings.get(op);
      if (b === undefined) bindings.set(op, (b = bind(op)));
      const requestHash = fingerprint(op.fingerprint(request.input));
      const d = deadline();
      let outcome: Outcome | undefined;
      try {
        if (b.steps !== undefined && (outcome = await invalidOrStored(b, request, requestHash, d)) !== undefined) return outcome;
        const claim = claimOf(b, request, advisoryLockId(request.tenant, request.key, b.c.endpoint), requestHash);
        let row: KeyRow | undefined;
        const span = tracingOn() ? transactionSpan("claim", request.traceparent, "idempotency_keys") : undefined;
        // The loop is here rather than in a function of its own: an async frame costs a promise per request.
        for (let resends = 0; row === undefined; resends++) {
          try {
            row = b.steps === undefined ? await d.run((endsAt) => ledger.run(b.claim, claim, endsAt)) : await steps.run(b.claim, claim, d.endsAt);
          } catch (error) {
            if (sqlState(error) === UNIQUE_VIOLATION) row = LOST_RACE;
            // A server gone read-only (a failover): answered 503, and the pool leaves it.
            else if (isReadOnly(error)) void dropReadOnlyConnections(sql);
            if (row === undefined && (b.steps !== undefined || resends >= MAX_RESENDS || !isConnectionLost(error))) {
              if (span) endSpan(span, sqlState(error) ?? "error");
              throw error;
            }
          }
        }
        span?.end();
        if (row.created !== 1) outcome = await unwritten(b, request, row, requestHash, claim, d);
        else if (b.steps === undefined) outcome = createdOf(op, row.answer ?? claim.body!);
        else {
          const held = { tenant: request.tenant, key: request.key, endpoint: b.c.endpoint, token: claim.token!, point: op.foreign!.firstPoint, resume: row.resume! };
          outcome = fromDrive(op, await drive(sql, op, held, false, b.steps));
        }
        if (outcome.kind === "created" || (outcome.kind === "stored_problem" && !outcome.replayed)) options.onCreated?.();
        return outcome;
      } finally {
        // This request held the key (an in_flight one never did, and must not wake its own wait).
        if (waits.size > 0 && outcome?.kind !== "in_flight") waits.wake(keyId(request.tenant, request.key, b.c.endpoint));
      }
    },
    async runWaiting(op, request, waitSeconds) {
      const started = performance.now();
      let outcome = await core.run(op, request);
      if (outcome.kind !== "in_flight" || waitSeconds <= 0 || options.listen === undefined) return { outcome, waitedSeconds: undefined };
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
      const id = keyId(request.tenant, request.key, endpointOf(op));
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
    read(work) {
      return deadline().run((endsAt) => work(sql, endsAt));
    },
    settings,
    statements: {
      get statements() {
        return ledger.statements + steps.statements;
      },
      get requests() {
        return ledger.requests + steps.requests;
      },
      get queued() {
        return ledger.queued + steps.queued;
      },
    },
  };
  return core;
}

/** The one row builder: the key's columns, then what the operation prepared in its mode. */
function claimOf(b: Binding, request: OperationRequest<unknown>, lockId: string, requestHash: string): Claim {
  const { op } = b.c;
  const input = request.input as Input;
  if (b.steps === undefined) {
    const prepared = op.prepare(input);
    const row = { tenant: request.tenant, key: request.key, lock_id: lockId, request_hash: requestHash, response_body: prepared.body, event_id: newEventId(), traceparent: request.traceparent, ...prepared.columns };
    return { row, exclusive: prepared.exclusive, body: prepared.body, token: undefined };
  }
  const prepared = op.foreign!.prepare(input, request.traceparent);
  const token = crypto.randomUUID();
  const row = { tenant: request.tenant, key: request.key, lock_id: lockId, request_hash: requestHash, resume: JSON.stringify(prepared.resume), token, ...prepared.columns };
  return { row, exclusive: prepared.exclusive, body: undefined, token };
}
