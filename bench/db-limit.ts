// (1) DB limit: pgbench running ONE statement that writes the same key row, charge row and
// outbox row as POST /charges (same tables, columns and indexes: the schema comes from
// lib/platform/migrations.ts migrate()), at the API benchmark's concurrency, on a fresh database.
import { rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freshDatabase, requireTool, run } from "./support.ts";

// Same shapes and sizes as POST /charges writes (lib/charges/charges.ts): a UUID key, a SHA-256 hex fingerprint,
// the stored 201 body, the charge, and the outbox row with its JSON payload.
const STATEMENT = `
with k as (
  insert into idempotency_keys (key, endpoint, request_hash, status, response_status, response_body, expires_at)
  values (gen_random_uuid()::text, 'POST /charges', encode(sha256(gen_random_uuid()::text::bytea), 'hex'),
          'COMPLETED', 201,
          '{"id":"6f1c2a7e-8d43-4b8e-9a57-0c3d2e1f4b5a","amountCents":4900,"createdAt":"2025-01-01T00:00:00.000Z"}',
          now() + make_interval(secs => 86400))
  returning 1
), c as (
  insert into charges (id, amount_cents, created_at) select gen_random_uuid(), 4900, now() from k returning id
)
insert into outbox (id, aggregate_id, event_type, payload, traceparent)
select gen_random_uuid(), c.id, 'ChargeCreated',
       '{"chargeId":"6f1c2a7e-8d43-4b8e-9a57-0c3d2e1f4b5a","amountCents":4900}', null
  from c;
`;

export interface DbLimit {
  readonly tps: number;
  readonly latencyAvgMs: number;
  readonly rows: number;
}

export async function dbLimit(connections: number, seconds: number): Promise<DbLimit> {
  const pgbench = requireTool("pgbench", "postgresql-contrib");
  const db = await freshDatabase("pgbench");
  const script = join(tmpdir(), `bench-charge-${db.name}.sql`);
  try {
    await writeFile(script, STATEMENT);
    // -n: no vacuum first, so the limit meets the tables as the API does (never vacuumed or
    // analyzed); -M prepared like the API's named statements.
    const out = await run([
      pgbench, "-n", "-M", "prepared", "-c", String(connections), "-j", "2",
      "-T", String(seconds), "-f", script, db.url,
    ]);
    const tps = Number(/tps = ([\d.]+) \(without initial connection time\)/.exec(out)?.[1]);
    const latencyAvgMs = Number(/latency average = ([\d.]+) ms/.exec(out)?.[1]);
    if (!Number.isFinite(tps)) throw new Error(`cannot parse pgbench output: ${out.slice(0, 400)}`);
    const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from outbox`;
    return { tps, latencyAvgMs, rows: row?.n ?? 0 };
  } finally {
    await rm(script, { force: true });
    await db.drop();
  }
}
