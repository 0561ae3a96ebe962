// The real `bun api.ts` opens its whole pool before it answers /readyz, so the first
// requests after a start do not wait for backends to be started; a server that refuses part
// of the pool leaves a warning and a process that serves all the same.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { createRoleDatabase } from "../testkit/database.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import type { Sql } from "../lib/platform/db.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { authEnv, authHeaders } from "../testkit/auth.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("pool_open");
const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  await db.drop();
});

async function apiBackends(sql: Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity where datname = current_database() and application_name = 'charges-api'`;
  return row!.n;
}

async function post(base: string): Promise<number> {
  const res = await fetch(`${base}/charges`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": crypto.randomUUID(), ...(await authHeaders()) },
    body: '{"amountCents":4200}',
  });
  await res.arrayBuffer();
  return res.status;
}

test("a new api.ts holds all API_POOL_SIZE connections when it first answers /readyz", async () => {
  const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, LOG_LEVEL: "warn", API_POOL_SIZE: "7", ...authEnv() } });
  try {
    // No request has been served yet: on demand, /readyz's one query would have opened one.
    expect(await apiBackends(db.sql)).toBe(7);
    expect(await post(api.base)).toBe(201);
    expect(await apiBackends(db.sql)).toBe(7);
  } finally {
    api.child.kill("SIGTERM");
    await api.child.done;
  }
});

test("a server that refuses part of the pool: one warning naming the SQLSTATE, and the API serves", async () => {
  const limited = await createRoleDatabase((await services()).adminDatabaseUrl, "pool_limited");
  cleanups.push(() => limited.drop());
  await limited.limitConnections(3);

  const lines: string[] = [];
  const api = await startEntrypoint("api", {
    env: { DATABASE_URL: limited.url, LOG_LEVEL: "info", API_POOL_SIZE: "6", ...authEnv() },
    stdout: (line) => lines.push(line),
  });
  try {
    const warnings = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.level === "warn");
    expect(warnings).toEqual([
      expect.objectContaining({ msg: "the pool did not open in full at start; the rest opens on demand", wanted: 6, failure: "53300" }),
    ]);
    // Connections refused while others start count against the limit too, so fewer than 3
    // may open; the pool opens more on demand later, within the limit.
    const opened = warnings[0]!.opened as number;
    expect(opened).toBeGreaterThanOrEqual(1);
    expect(opened).toBeLessThanOrEqual(3);
    expect(await post(api.base)).toBe(201);
    const [row] = await limited.sql<{ n: number }[]>`select count(*)::int as n from charges`;
    expect(row!.n).toBe(1);
  } finally {
    api.child.kill("SIGTERM");
    await api.child.done;
    // The role's backends end with the process; only then can the role be dropped.
    await waitUntil(async () => (await limited.backends()) === 0, 10_000, "the API's backends to end");
  }
});
