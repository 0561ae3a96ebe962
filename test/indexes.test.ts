// The claim and the ops jobs read through their indexes on realistic data: the statements are
// captured as the code sends them (postgres.js's debug hook) and run under EXPLAIN ANALYZE.
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import postgres from "postgres";
import { loadConfig } from "../lib/platform/config.ts";
import type { Sql, Tx } from "../lib/platform/db.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { claimFollowers, claimHeads, claimHeadsUnbounded, batchSettings, markPublished, type OutboxRow } from "../lib/relay/outbox-sql.ts";
import { newGauges, runJob } from "../lib/ops/jobs.ts";
import { freshDatabase } from "../testkit/services.ts";

setDefaultTimeout(60_000);

const PARKED = 5_000;
const DUE = 5;
const COMPLETED_KEYS = 20_000;
const OLD_CHARGES = 20_000;

const db = await freshDatabase("indexes");
const config = loadConfig({ DATABASE_URL: db.url, OUTBOX_RETENTION_SECONDS: String(7 * 86_400) });
afterAll(() => db.drop());

interface Statement {
  readonly query: string;
  readonly params: unknown[];
}

/** A pool that records every statement it sends, with its parameters. */
function recordingPool(): { sql: Sql; statements: Statement[] } {
  const statements: Statement[] = [];
  const sql = postgres(db.url, {
    max: 2,
    onnotice: () => {},
    debug: (_connection, query, params) => statements.push({ query, params: [...params] }),
  }) as unknown as Sql;
  return { sql, statements };
}

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  "Actual Rows"?: number;
  "Rows Removed by Filter"?: number;
  "Index Cond"?: string;
  Plans?: PlanNode[];
}

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

/** EXPLAIN (ANALYZE, FORMAT JSON) of a recorded statement; `prepare` runs first in the same transaction. */
async function explain(statement: Statement, prepare?: (tx: Sql) => Promise<void>): Promise<PlanNode[]> {
  return db.sql.begin(async (tx) => {
    if (prepare) await prepare(tx as unknown as Sql);
    // The statement text is the program's own, captured above; its values stay parameters.
    const [row] = await tx.unsafe(`explain (analyze, format json) ${statement.query}`, statement.params as never[]);
    const plan = (row as unknown as { "QUERY PLAN": { Plan: PlanNode }[] })["QUERY PLAN"][0]!.Plan;
    return nodes(plan);
  }) as Promise<PlanNode[]>;
}

function scansOf(plan: PlanNode[], relation: string): PlanNode[] {
  return plan.filter((n) => n["Relation Name"] === relation);
}

beforeAll(async () => {
  // Charges kept for ever: most are older than the outbox retention, with no outbox row left.
  await db.sql`insert into charges (id, amount_cents, created_at)
               select gen_random_uuid(), 100, now() - interval '30 days' - g * interval '1 minute'
                 from generate_series(1, ${OLD_CHARGES}) g`;
  const fresh = PARKED + DUE + 50;
  await db.sql`with c as (
                 insert into charges (id, amount_cents, created_at)
                 select gen_random_uuid(), 100, now() - interval '1 hour' from generate_series(1, ${fresh}) returning id, created_at)
               insert into outbox (id, aggregate_id, event_type, payload, created_at, published_at)
               select gen_random_uuid(), id, 'ChargeCreated', '{}', created_at, created_at from c`;
  // Parked rows are the oldest unpublished ones: every claim would meet them first.
  await db.sql`update outbox set published_at = null, parked_at = now(), attempts = 10
                 where id in (select id from outbox order by created_at, id limit ${PARKED})`;
  await db.sql`update outbox set published_at = null, created_at = now()
                 where id in (select id from outbox where parked_at is null order by id limit ${DUE})`;
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, response_status, response_body, created_at, expires_at)
               select gen_random_uuid()::text, 'POST /charges', 'h', 'COMPLETED', 201, '{}',
                      now() - g * interval '1 second', now() + interval '1 day'
                 from generate_series(1, ${COMPLETED_KEYS}) g`;
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, created_at, expires_at)
               select 'stuck-' || g, 'POST /charges', 'h', 'STARTED', now() - interval '10 minutes', now() + interval '1 day'
                 from generate_series(1, 3) g`;
  await db.sql`analyze`;
});

test(`the relay's claim walks outbox_due_idx: none of ${PARKED} parked rows is read and filtered`, async () => {
  const { sql, statements } = recordingPool();
  try {
    const claimed = await sql.begin(async (tx) => {
      await batchSettings(tx);
      return claimBatch(tx, 50);
    });
    expect(claimed).toHaveLength(DUE);
  } finally {
    await sql.end();
  }
  const claim = statements.find((s) => /for update skip locked/i.test(s.query) && /from outbox o/i.test(s.query));
  expect(claim).toBeDefined();
  const plan = await explain(claim!, batchSettings);
  // The two scans besides the probe of the rows before a refund (none here: never executed):
  // the window's bound and the heads, both on the pending index.
  const scans = scansOf(plan, "outbox").filter((scan) => scan["Index Name"] !== "outbox_aggregate_hash_idx");
  expect(scans).toHaveLength(2);
  for (const scan of scans) expect(scan).toMatchObject({ "Node Type": "Index Scan", "Index Name": "outbox_due_idx" });
  expect(Math.max(...scans.map((scan) => scan["Actual Rows"] ?? 0))).toBe(DUE);
  for (const node of plan) expect(node["Rows Removed by Filter"] ?? 0).toBeLessThan(PARKED);
  // The short claim looked for the heads' followers by the hash index, never by walking the
  // pending index once per head.
  const followers = statements.find((s) => /for update of f skip locked/i.test(s.query));
  expect(followers).toBeDefined();
  const probes = scansOf(await explain(followers!, batchSettings), "outbox");
  expect(probes.length).toBeGreaterThan(0);
  for (const probe of probes) expect(probe["Index Name"] ?? probe.Plans?.[0]?.["Index Name"]).toBe("outbox_aggregate_hash_idx");
});

/**
 * The scans of outbox_due_idx in the plan of the claim `claim` sends from a frontier a minute
 * past every due row (the rows were created when the data was set up), after checking that it
 * claimed nothing.
 */
async function scansFromFrontier(claim: (tx: Sql | Tx, frontier: string) => Promise<readonly unknown[]>): Promise<PlanNode[]> {
  const [{ frontier } = { frontier: "" }] = await db.sql<{ frontier: string }[]>`
    select to_char((now() + interval '1 minute') at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as frontier`;
  const { sql, statements } = recordingPool();
  try {
    const claimed = await sql.begin(async (tx) => {
      await batchSettings(tx);
      return claim(tx, frontier);
    });
    expect(claimed).toHaveLength(0);
  } finally {
    await sql.end();
  }
  const statement = statements.find((s) => /for update skip locked/i.test(s.query) && /created_at >=/i.test(s.query));
  expect(statement).toBeDefined();
  const scans = scansOf(await explain(statement!, batchSettings), "outbox").filter((scan) => scan["Index Name"] === "outbox_due_idx");
  for (const scan of scans) {
    expect(scan).toMatchObject({ "Node Type": "Index Scan", "Actual Rows": 0 });
    expect(scan["Index Cond"]).toContain("created_at >=");
  }
  return scans;
}

test("a claim from the frontier starts its index scan there: no row before it is read", async () => {
  // The window's bound and the heads: both start at the frontier.
  expect(await scansFromFrontier((tx, frontier) => claimBatch(tx, 50, frontier))).toHaveLength(2);
});

test("a claim from the frontier without a window walks outbox_due_idx once, from there", async () => {
  expect(await scansFromFrontier(async (tx, frontier) => (await claimHeadsUnbounded(tx, 50, frontier)).heads)).toHaveLength(1);
});

test("a batch's transaction plans on the indexes and commits without waiting for its WAL flush", async () => {
  const settings = await db.sql.begin(async (tx) => {
    await batchSettings(tx as unknown as Sql);
    return tx<{ sort: string; seqscan: string; commit: string }[]>`
      select current_setting('enable_sort') as sort, current_setting('enable_seqscan') as seqscan,
             current_setting('synchronous_commit') as commit`;
  });
  expect(settings[0]).toEqual({ sort: "off", seqscan: "off", commit: "off" });
  // Local to the transaction: the next one on the same server is back to the defaults.
  const [after] = await db.sql<{ commit: string }[]>`select current_setting('synchronous_commit') as commit`;
  expect(after?.commit).toBe("on");
});

class RolledBack extends Error {}

/** A claim as the relay makes it: the heads, then followers while there is room. */
async function claimBatch(tx: Sql | Tx, limit: number, from?: string): Promise<OutboxRow[]> {
  const { heads } = await claimHeads(tx, limit, from);
  return [...heads, ...(await claimFollowers(tx, heads, limit - heads.length))];
}

test("the relay's mark finds the claimed rows by their place (a TID scan), not through an index", async () => {
  const { sql, statements } = recordingPool();
  try {
    // Claimed and marked as the relay does, then rolled back: the rows stay due for the other tests.
    await sql
      .begin(async (tx) => {
        await batchSettings(tx);
        const rows = await claimBatch(tx, 50);
        expect(await markPublished(tx, rows.map((row) => row.tid))).toBe(DUE);
        throw new RolledBack();
      })
      .catch((error: unknown) => {
        if (!(error instanceof RolledBack)) throw error;
      });
  } finally {
    await sql.end();
  }
  const mark = statements.find((s) => /update outbox set published_at/i.test(s.query));
  expect(mark).toBeDefined();
  // Planned only (no ANALYZE): nothing is marked.
  const [row] = await db.sql.unsafe(`explain (format json) ${mark!.query}`, mark!.params as never[]);
  const plan = nodes((row as unknown as { "QUERY PLAN": { Plan: PlanNode }[] })["QUERY PLAN"][0]!.Plan);
  expect(scansOf(plan, "outbox").map((n) => n["Node Type"])).toEqual(["ModifyTable", "Tid Scan"]);
  const [due] = await db.sql<{ n: number }[]>`select count(*)::int as n from outbox where published_at is null and parked_at is null`;
  expect(due?.n).toBe(DUE);
});

test("stale-keys reads only STARTED keys, through idempotency_keys_started_idx", async () => {
  const { sql, statements } = recordingPool();
  try {
    expect(await runJob("stale-keys", sql, config, newGauges(), silentLogger)).toMatchObject({ count: 3 });
  } finally {
    await sql.end();
  }
  const queries = statements.filter((s) => /from idempotency_keys/i.test(s.query) && /'STARTED'/.test(s.query));
  expect(queries).toHaveLength(2); // the summary and the sample
  for (const query of queries) {
    const scans = scansOf(await explain(query), "idempotency_keys");
    expect(scans.length).toBeGreaterThan(0);
    for (const scan of scans) {
      expect(scan["Node Type"]).not.toBe("Seq Scan");
      expect(scan["Index Name"]).toBe("idempotency_keys_started_idx");
    }
  }
});

test("reconcile reads the charges within the outbox retention through charges_created_idx, not all of them", async () => {
  const { sql, statements } = recordingPool();
  try {
    expect(await runJob("reconcile", sql, config, newGauges(), silentLogger)).toMatchObject({ count: 0 });
  } finally {
    await sql.end();
  }
  const query = statements.find((s) => /from charges/i.test(s.query) && /not exists/i.test(s.query));
  expect(query).toBeDefined();
  const plan = await explain(query!);
  const scans = scansOf(plan, "charges");
  expect(scans).toHaveLength(1);
  expect(scans[0]).toMatchObject({ "Actual Rows": PARKED + DUE + 50 });
  // An index scan, or a bitmap heap scan fed by one (the planner's pick depends on row width).
  expect(scans[0]!["Node Type"]).toMatch(/^(Index Scan|Index Only Scan|Bitmap Heap Scan)$/);
  const index = scans[0]!["Node Type"] === "Bitmap Heap Scan" ? plan.find((n) => n["Node Type"] === "Bitmap Index Scan") : scans[0];
  expect(index?.["Index Name"]).toBe("charges_created_idx");
});
