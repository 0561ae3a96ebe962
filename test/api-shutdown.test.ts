// SIGTERM on the real `bun api.ts`: it stops accepting, lets the request in flight finish
// with its 201, closes the pool and exits 0.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { freshDatabase } from "../testkit/services.ts";
import { holdKey } from "../testkit/database.ts";
import { waitForApiBlockedOnLock } from "../testkit/api.ts";
import { acceptsTcp, startEntrypoint } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";
import { authEnv, authHeaders } from "../testkit/auth.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("api_shutdown");
afterAll(() => db.drop());

test("a request held inside its statement when SIGTERM arrives completes with 201; the process exits 0", async () => {
  const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, LOG_LEVEL: "warn", ...authEnv() } });
  const key = crypto.randomUUID();
  const hold = await holdKey(db.sql, key);
  try {
    const inFlight = fetch(`${api.base}/charges`, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": key, ...(await authHeaders()) },
      body: '{"amountCents":4200}',
    });
    await waitForApiBlockedOnLock(db.sql);
    api.child.kill("SIGTERM");
    // The listener closing is the sign the signal was handled, before the hold goes.
    await waitUntil(async () => !(await acceptsTcp(api.port)), 10_000, "the API to stop accepting connections");
    expect(api.child.exited).toBe(false);
    await hold.release();
    const res = await inFlight;
    expect(res.status).toBe(201);
    const charge = (await res.json()) as { id: string; amountCents: number };
    expect(charge.amountCents).toBe(4200);
    expect(await api.child.done).toBe(0);
    const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from charges where id = ${charge.id}::uuid`;
    expect(row!.n).toBe(1);
    // The pool was closed, not left to die with the process: no backend of the API remains.
    const [backends] = await db.sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity where datname = current_database() and application_name = 'charges-api'`;
    expect(backends!.n).toBe(0);
  } finally {
    await hold.release();
    api.child.kill("SIGKILL");
  }
});
