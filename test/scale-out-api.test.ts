// Two real `bun api.ts` processes on one port (API_REUSE_PORT=1) and one database: the kernel
// spreads the connections over both, and requests for one key race across processes. Each
// key still gets exactly one charge; every other request for it is a byte-identical 201
// replay or a 409 in flight; nothing answers 5xx.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { freshDatabase } from "../testkit/services.ts";
import { startEntrypoint, type Service } from "../testkit/processes.ts";
import { authEnv, authHeaders } from "../testkit/auth.ts";
import { freePort } from "../dev/ports.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

const KEYS = 24;
// Requests per key, all sent at once, each on a connection of its own.
const SENDS_PER_KEY = 6;
// Small pools: two processes and the other test files share one server's max_connections.
const POOL_SIZE = "4";

const db = await freshDatabase("scale_out_api");
const port = await freePort();
// The key hashes each process logged an answer for, by process, and whether it listens.
const answeredBy: Set<string>[] = [new Set(), new Set()];
const listening = [false, false];
const apis: Service[] = [];
for (const [i, seen] of answeredBy.entries()) {
  const onLine = (line: string) => {
    if (!line.startsWith("{")) return;
    const entry = JSON.parse(line) as { msg?: string; keyHash?: string; reusePort?: boolean };
    if (entry.msg === "api listening" && entry.reusePort === true) listening[i] = true;
    if (entry.msg === "request" && entry.keyHash) seen.add(entry.keyHash);
  };
  // Not by its ready path: once the first listens, the port answers whether this one does or not.
  const api = await startEntrypoint("api", {
    port,
    stdout: onLine,
    readyPath: false,
    env: { DATABASE_URL: db.url, API_REUSE_PORT: "1", API_POOL_SIZE: POOL_SIZE, LOG_LEVEL: "info", ...authEnv() },
  });
  apis.push(api);
  await waitUntil(() => {
    if (api.child.exited) throw new Error(`api ${i + 1} exited: ${api.child.output()}`);
    return listening[i];
  }, 20_000, `api ${i + 1} to listen`);
}
afterAll(async () => {
  await Promise.all(apis.map((a) => a.child.stop()));
  await db.drop();
});

test("both processes listen on the one port", () => {
  expect(listening).toEqual([true, true]);
  expect(apis.every((a) => !a.child.exited && a.port === port)).toBe(true);
});

test("concurrent requests over shared keys across two processes: one charge per key, the rest replays or 409s, no 5xx", async () => {
  const headers = { "content-type": "application/json", ...(await authHeaders()) };
  const keys = Array.from({ length: KEYS }, () => crypto.randomUUID());
  const sends = keys.flatMap((key) =>
    Array.from({ length: SENDS_PER_KEY }, async () => {
      // keepalive: false, so each request opens its own connection and the kernel picks a process for it.
      const res = await fetch(`http://127.0.0.1:${port}/charges`, {
        method: "POST",
        headers: { ...headers, "idempotency-key": key, connection: "close" },
        body: '{"amountCents":4900}',
        keepalive: false,
      });
      return { key, status: res.status, replayed: res.headers.get("idempotent-replayed") === "true", body: await res.text() };
    }),
  );
  const answers = await Promise.all(sends);

  expect(answers.filter((a) => a.status >= 500)).toEqual([]);
  expect(answers.filter((a) => a.status !== 201 && a.status !== 409)).toEqual([]);
  const rows = await db.sql<{ key: string; charges: number; outbox: number }[]>`
    select k.key, (select count(*)::int from charges c where c.id = (k.response_body::json ->> 'id')::uuid) as charges,
           (select count(*)::int from outbox o where o.aggregate_id = (k.response_body::json ->> 'id')::uuid) as outbox
      from idempotency_keys k`;
  expect(rows.length).toBe(KEYS);
  expect(rows.every((r) => r.charges === 1 && r.outbox === 1)).toBe(true);
  const [total] = await db.sql<{ charges: number; outbox: number }[]>`
    select (select count(*)::int from charges) as charges, (select count(*)::int from outbox) as outbox`;
  expect(total).toEqual({ charges: KEYS, outbox: KEYS });

  for (const key of keys) {
    const mine = answers.filter((a) => a.key === key && a.status === 201);
    // Exactly one creation per key; every other 201 is its replay, byte for byte.
    expect(mine.filter((a) => !a.replayed).length).toBe(1);
    expect(new Set(mine.map((a) => a.body)).size).toBe(1);
  }
  // The race really crossed processes: both answered, and some key was answered by both.
  const [first, second] = answeredBy as [Set<string>, Set<string>];
  expect(first.size).toBeGreaterThan(0);
  expect(second.size).toBeGreaterThan(0);
  expect([...first].some((hash) => second.has(hash))).toBe(true);
});
