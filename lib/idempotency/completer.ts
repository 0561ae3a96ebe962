// The completer: drives every STARTED key whose lease has expired to its final state, without
// any client, so that its event is published even if the client never comes back; and parks
// the keys it could not resolve within PAYMENT_PROCESSOR_RESOLVE_WINDOW for an operator.
//
// One runner at a time: a round claims its keys in one short transaction that holds the job's
// advisory lock (pg_try_advisory_xact_lock: also behind a transaction pooler), taking each
// key's lease as a request would. The keys are then driven with nothing held but their
// leases: no transaction, row lock or connection while the processor is called.
import type { Sql } from "../platform/db.ts";
import { transaction } from "../platform/tx.ts";
import type { Operation, Resume } from "./model.ts";
import type { HeldKey } from "./skeleton.ts";
import { drive, type DriveOptions, type DriveResult } from "./drive.ts";

export interface CompleterOptions extends DriveOptions {
  readonly lockId: bigint;
  /** Keys claimed per round. */
  readonly batch: number;
  /**
   * Keys driven at once: their calls wait on the processor, not on this process or the
   * database (each step's statement borrows a connection for its own moment only).
   */
  readonly parallel: number;
  readonly resolveWindowSeconds: number;
  /** The operations with processor steps, by their key's endpoint (lib/charges/index.ts). */
  readonly operations: ReadonlyMap<string, Operation>;
  readonly onResumed?: (endpoint: string) => void;
}

export interface CompleterRound {
  readonly claimed: number;
  readonly finished: number;
  readonly unknown: number;
  readonly lost: number;
  readonly parked: number;
}

interface ClaimedRow {
  readonly tenant: string;
  readonly key: string;
  readonly endpoint: string;
  readonly lease_token: string;
  readonly recovery_point: string;
  readonly resume: Resume;
}

/** One round, or undefined when another process is running the completer. */
export async function completeRound(sql: Sql, options: CompleterOptions): Promise<CompleterRound | undefined> {
  const claim = await transaction(sql, async (tx) => {
    const [lock] = await tx<{ locked: boolean }[]>`select pg_try_advisory_xact_lock(${options.lockId.toString()}::bigint) as locked`;
    if (!lock?.locked) return undefined;
    const parked = await parkUnresolved(tx as unknown as Sql, options.resolveWindowSeconds);
    const keys = await claimExpired(tx as unknown as Sql, [...options.operations.keys()], options.batch, options.leaseMs);
    return { parked, keys };
  });
  if (claim === undefined) return undefined;
  const results: DriveResult[] = [];
  const queue = [...claim.keys];
  const lane = async (): Promise<void> => {
    for (let row = queue.shift(); row !== undefined; row = queue.shift()) results.push(await driveClaimed(sql, row, options));
  };
  await Promise.all(Array.from({ length: Math.min(options.parallel, queue.length) }, lane));
  const count = (kind: DriveResult["kind"]) => results.filter((r) => r.kind === kind).length;
  return { claimed: claim.keys.length, finished: count("final"), unknown: count("unknown"), lost: count("lost"), parked: claim.parked + count("parked") };
}

function driveClaimed(sql: Sql, row: ClaimedRow, options: CompleterOptions): Promise<DriveResult> {
  const op = options.operations.get(row.endpoint);
  if (op === undefined) throw new Error(`bug: claimed a key of ${row.endpoint}, which has no processor steps`);
  const held: HeldKey = { tenant: row.tenant, key: row.key, endpoint: row.endpoint, token: row.lease_token, point: row.recovery_point, resume: row.resume };
  options.onResumed?.(row.endpoint);
  return drive(sql, op, held, true, options);
}

/**
 * Parks the STARTED keys older than the window (and not held): the completer stops trying
 * them, and the operator is told (idempotency_parked_keys, the alert, `bun run ops parked`).
 * A request with the key may still resume it.
 */
async function parkUnresolved(sql: Sql, windowSeconds: number): Promise<number> {
  const result = await sql`
    update idempotency_keys set parked_at = now()
     where status = 'STARTED' and parked_at is null and lease_until <= now()
       and created_at < now() - make_interval(secs => ${windowSeconds}::int)`;
  return result.count;
}

/** Takes the lease of up to `batch` expired, unparked keys whose back-off has passed, oldest lease first. */
async function claimExpired(sql: Sql, endpoints: string[], batch: number, leaseMs: number): Promise<ClaimedRow[]> {
  return sql<ClaimedRow[]>`
    update idempotency_keys k
       set lease_token = gen_random_uuid(), lease_until = now() + make_interval(secs => ${leaseMs / 1000}::float8)
      from (select tenant, key, endpoint
              from idempotency_keys
             where status = 'STARTED' and lease_until <= now() and parked_at is null
               and coalesce(next_attempt_at, '-infinity') <= now()
               and endpoint in ${sql(endpoints)}
             order by lease_until
             limit ${batch}
               for update skip locked) due
     where k.tenant = due.tenant and k.key = due.key and k.endpoint = due.endpoint
    returning k.tenant, k.key, k.endpoint, k.lease_token, k.recovery_point, k.resume`;
}

export interface ParkedKey {
  readonly keyHash: string;
  readonly endpoint: string;
  readonly tenant: string;
  readonly recoveryPoint: string;
  readonly resume: Resume;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly parkedAt: Date;
  readonly createdAt: Date;
}

/** How many keys are parked now (idempotency_parked_keys). */
export async function parkedCount(sql: Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where status = 'STARTED' and parked_at is not null`;
  return row?.n ?? 0;
}
