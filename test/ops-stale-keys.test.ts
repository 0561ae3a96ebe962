// The stale-STARTED report names keys by their hash: an idempotency key is a bearer of its
// request's identity and never goes into a log line or a job's printed result.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { loadConfig } from "../lib/platform/config.ts";
import { createLogger } from "../lib/platform/log.ts";
import { keyHash } from "../lib/platform/redact.ts";
import { newGauges, runJob } from "../lib/ops/jobs.ts";
import { freshDatabase } from "../testkit/services.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("ops_stale_keys");
afterAll(() => db.drop());

test("stale STARTED keys are reported by key hash, never by the key itself", async () => {
  const key = `order-${crypto.randomUUID()}-payment`;
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, created_at, expires_at)
               values (${key}, 'POST /charges', 'h', 'STARTED', now() - interval '1 hour', now() + interval '1 day')`;
  const lines: string[] = [];
  const log = createLogger("debug", "ops", (line) => lines.push(line));
  const result = await runJob("stale-keys", db.sql, loadConfig({ DATABASE_URL: db.url }), newGauges(), log);

  expect(result).toMatchObject({ job: "stale-keys", count: 1, sample: [{ keyHash: keyHash(key), endpoint: "POST /charges" }] });
  expect(lines.some((line) => line.includes(keyHash(key)))).toBe(true);
  expect(JSON.stringify(result)).not.toContain(key);
  for (const line of lines) expect(line).not.toContain(key);
});
