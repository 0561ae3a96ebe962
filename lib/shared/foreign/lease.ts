// The key row's lease, as statements: each one a short transaction of its own, and each
// write a compare-and-set on the holder's token, so a holder whose lease was taken over can
// never write again (it finds no row and stops).
import type { Sql } from "../db.ts";
import { transaction } from "../tx.ts";
import type { FinalOutcome, ForeignProcess, HeldKey, KeyRef, Resume, StoredResponse } from "./types.ts";

interface LeaseRow {
  readonly recovery_point: string;
  readonly resume: Resume;
}

/**
 * Takes the lease of a STARTED key whose lease has expired (its holder died, or gave up on an
 * unknown outcome); undefined when the key is not STARTED or its lease is alive. Two takers at
 * once: the second re-reads the row after the first commits and finds the lease alive.
 */
export async function takeLease(sql: Sql, ref: KeyRef, leaseMs: number): Promise<HeldKey | undefined> {
  const token = crypto.randomUUID();
  const [row] = await sql<LeaseRow[]>`
    update idempotency_keys
       set lease_token = ${token}::uuid, lease_until = now() + make_interval(secs => ${leaseMs / 1000}::float8)
     where tenant = ${ref.tenant} and key = ${ref.key} and endpoint = ${ref.endpoint}
       and status = 'STARTED' and lease_until <= now()
    returning recovery_point, resume`;
  return row ? { ...ref, token, point: row.recovery_point, resume: row.resume } : undefined;
}

/** Records a step's result and renews the lease, if `key`'s holder still holds it. */
export async function recordStep(sql: Sql, key: HeldKey, point: string, resume: Resume, leaseMs: number): Promise<boolean> {
  const rows = await sql`
    update idempotency_keys
       set recovery_point = ${point}, resume = ${sql.json(resume)},
           lease_until = now() + make_interval(secs => ${leaseMs / 1000}::float8)
     where tenant = ${key.tenant} and key = ${key.key} and endpoint = ${key.endpoint}
       and status = 'STARTED' and lease_token = ${key.token}::uuid`;
  return rows.count === 1;
}

// The completer's back-off per key after an unknown outcome: 2^attempts seconds, at most this.
// A processor down for minutes is tried a few times a minute at first, then every 5 minutes.
const MAX_BACKOFF_S = 300;

/**
 * Gives the lease up after an unknown outcome, keeping the recovery point: the next request
 * with the key may resume at once; the completer waits for the key's back-off.
 */
export async function releaseLease(sql: Sql, key: HeldKey, resume: Resume, error: string): Promise<boolean> {
  const rows = await sql`
    update idempotency_keys
       set lease_until = now(), lease_token = null, resume = ${sql.json(resume)}, last_error = ${error},
           attempts = attempts + 1,
           next_attempt_at = now() + make_interval(secs => least(power(2, least(attempts, 16)), ${MAX_BACKOFF_S})::float8)
     where tenant = ${key.tenant} and key = ${key.key} and endpoint = ${key.endpoint}
       and status = 'STARTED' and lease_token = ${key.token}::uuid`;
  return rows.count === 1;
}

/**
 * Phase 3, in one transaction: the key row locked if `key`'s holder still holds it, the
 * operation's final rows and event, and the key COMPLETED with the response to replay.
 * undefined when the lease was lost: nothing is written.
 */
export function finishUnderLease(sql: Sql, process: ForeignProcess, key: HeldKey, outcome: FinalOutcome, resume: Resume): Promise<StoredResponse | undefined> {
  return transaction(sql, async (tx) => {
    const held = await tx`
      select 1 from idempotency_keys
       where tenant = ${key.tenant} and key = ${key.key} and endpoint = ${key.endpoint}
         and status = 'STARTED' and lease_token = ${key.token}::uuid
         for update`;
    if (held.length === 0) return undefined;
    const response = await process.finish(tx as unknown as Sql, key, outcome, resume);
    await tx`
      update idempotency_keys
         set status = 'COMPLETED', response_status = ${response.status}, response_body = ${response.body},
             recovery_point = ${outcome}, resume = ${tx.json(resume)}, lease_token = null, lease_until = null,
             last_error = null, next_attempt_at = null, parked_at = null
       where tenant = ${key.tenant} and key = ${key.key} and endpoint = ${key.endpoint}`;
    return response;
  });
}
