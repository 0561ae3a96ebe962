// Phase 3 of a foreign step as ONE statement, for one key or many (group commit in the API):
// the compare-and-set on each holder's token completes its key with the response computed
// before the statement, and only the keys it completed get the operation's final rows and
// their event. A key whose lease was taken over is not written, and does not stop the others.
import type postgres from "postgres";
import { newEventId } from "../../events.ts";
import type { Sql } from "../db.ts";
import { boundedStatement } from "../bounded-statement.ts";
import { insertEvents } from "../outbox-insert.ts";
import type { FinalOutcome, FinalValue, ForeignProcess, HeldKey, Resume, StoredResponse } from "./types.ts";

/** One key's phase 3, by its holder. */
export interface FinishRequest {
  readonly key: HeldKey;
  readonly outcome: FinalOutcome;
  readonly resume: Resume;
}

/** A process's phase 3 bound to one client: its fragments, built once. */
export interface CompiledFinish {
  readonly process: ForeignProcess;
  readonly record: postgres.Fragment;
  readonly write: postgres.Fragment;
  readonly event: postgres.Fragment;
}

// The core's columns of `req`, before the operation's own.
const CORE_COLUMNS: Readonly<Record<string, string>> = {
  n: "int",
  tenant: "text",
  key: "text",
  endpoint: "text",
  token: "uuid",
  outcome: "text",
  response_status: "int",
  response_body: "text",
  resume: "jsonb",
  event_id: "uuid",
  traceparent: "text",
};
const COLUMN = /^[a-z_][a-z0-9_]*$/;
const SQL_TYPE = /^(uuid|text|int|bigint|boolean|jsonb|timestamptz)$/;

const compiled = new WeakMap<Sql, Map<ForeignProcess, CompiledFinish>>();

export function compileFinish(sql: Sql, process: ForeignProcess): CompiledFinish {
  let bySql = compiled.get(sql);
  if (bySql === undefined) compiled.set(sql, (bySql = new Map()));
  const known = bySql.get(process);
  if (known !== undefined) return known;
  const { columns, write } = process.finishSql(sql);
  const record = Object.entries({ ...CORE_COLUMNS, ...columns }).map(([name, type]) => {
    // Names and types come from declarations in lib/, never from a request.
    if (!COLUMN.test(name) || !SQL_TYPE.test(type)) throw new Error(`bug: ${process.endpoint} declares phase 3 column ${name} ${type}`);
    return `${name} ${type}`;
  });
  const c: CompiledFinish = { process, record: sql.unsafe(record.join(", ")), write, event: insertEvents(sql) };
  bySql.set(process, c);
  return c;
}

/**
 * Phase 3 of every request of `requests` in one statement and one transaction. For each, in
 * order: the response stored, or undefined when its holder had lost the lease (nothing of it
 * written). The update of the key is the compare-and-set: under READ COMMITTED a key taken
 * over meanwhile is re-read after the taker commits and no longer matches the token.
 */
export async function finishKeys(sql: Sql, c: CompiledFinish, requests: readonly FinishRequest[], endsAt = Number.POSITIVE_INFINITY): Promise<(StoredResponse | undefined)[]> {
  const finals = requests.map((r) => c.process.final(r.key, r.outcome, r.resume));
  const rows = requests.map((r, n): Record<string, FinalValue | Resume> => ({
    n,
    tenant: r.key.tenant,
    key: r.key.key,
    endpoint: r.key.endpoint,
    token: r.key.token,
    outcome: r.outcome,
    response_status: finals[n]!.response.status,
    response_body: finals[n]!.response.body,
    resume: r.resume,
    event_id: newEventId(),
    traceparent: typeof r.resume.traceparent === "string" ? r.resume.traceparent : null,
    ...finals[n]!.columns,
  }));
  const done = await boundedStatement(sql, endsAt, (q) => q<{ n: number }[]>`
    with req as (
      select * from jsonb_to_recordset(${q.json(rows as never)}) as r(${c.record})
    ),
    completed as (
      update idempotency_keys k
         set status = 'COMPLETED', response_status = r.response_status, response_body = r.response_body,
             recovery_point = r.outcome, resume = r.resume, lease_token = null, lease_until = null,
             last_error = null, next_attempt_at = null, parked_at = null
        from req r
       where k.tenant = r.tenant and k.key = r.key and k.endpoint = r.endpoint
         and k.status = 'STARTED' and k.lease_token = r.token
      returning r.n
    ),
    won as (
      select r.* from req r join completed d on d.n = r.n
    ),
    ${c.write},
    ${c.event}
    select n from completed`);
  // A Set of n, not positions: postgres.js 3.4.9 can hand back a sparse array (porsager/postgres#1119).
  const won = new Set(done.map((d) => d.n));
  return finals.map((f, n) => (won.has(n) ? f.response : undefined));
}
