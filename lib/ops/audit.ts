// The operators' audit trail: one row per action taken through the console or `bun run ops`
// (who, through what, which action, on what, why, what came of it, when), written after the
// action so that its outcome is the one recorded. Read newest first by the console's audit
// page and `bun run ops audit`.
import type { Sql } from "../platform/db.ts";

/** Who acts, and through which tool. */
export interface Actor {
  /** The console token's `sub`, or the CLI's OPS_ACTOR (else the login name). */
  readonly name: string;
  readonly via: "console" | "cli";
}

export interface AuditEntry {
  readonly actor: Actor;
  readonly action: string;
  readonly target: string;
  readonly reason: string;
  readonly outcome: Readonly<Record<string, unknown>>;
}

export interface AuditRow {
  readonly id: string;
  readonly at: string;
  readonly actor: string;
  readonly via: string;
  readonly action: string;
  readonly target: string;
  readonly reason: string;
  readonly outcome: Record<string, unknown>;
}

/** Appends one entry. */
export async function recordAction(sql: Sql, entry: AuditEntry): Promise<void> {
  await sql`
    insert into operator_audit (actor, via, action, target, reason, outcome)
    values (${entry.actor.name}, ${entry.actor.via}, ${entry.action}, ${entry.target}, ${entry.reason}, ${sql.json(entry.outcome as never)})`;
}

/** The newest `limit` entries, from `offset`, with the total. */
export async function listAudit(sql: Sql, limit: number, offset: number): Promise<{ total: number; rows: AuditRow[] }> {
  const rows = await sql<(AuditRow & { total: number })[]>`
    select id::text, to_char(at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as at, actor, via, action, target, reason, outcome,
           count(*) over ()::int as total
      from operator_audit
     order by at desc, id desc
     limit ${limit} offset ${offset}`;
  return { total: rows[0]?.total ?? 0, rows: rows.map(({ total: _, ...row }) => row) };
}
