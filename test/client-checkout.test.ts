// examples/checkout.ts survives the proxy: run as a process while every answer is lost, it
// ends with 75 (no final answer) though the charge was created; run again (a new process,
// same order), it resumes the key from its file and gets that charge as a replay.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { counts } from "../testkit/api.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { startFaultProxy, type Fate } from "../testkit/http-fault-proxy.ts";
import { runToExit, startEntrypoint } from "../testkit/processes.ts";
import { freshDatabase } from "../testkit/services.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("client_checkout");
const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, LOG_LEVEL: "warn", ...authEnv() } });
let fate: Fate = "pass";
const proxy = await startFaultProxy({ upstreams: [api.port], decide: () => fate });

afterAll(async () => {
  await proxy.close();
  await api.child.stop();
  await db.drop();
});

test("every answer lost: exit 75 with the key; the next run of the same order gets the one charge", async () => {
  const keys = join(mkdtempSync(join(tmpdir(), "checkout-")), "keys.json");
  const env = { API_URL: proxy.url, API_TOKEN: await tokenFor(), CHECKOUT_KEYS: keys, CHECKOUT_DEADLINE_MS: "1500" };
  fate = "drop";
  const lost = await runToExit(["bun", "examples/checkout.ts", "order-1001", "2500"], env);
  expect(lost.code).toBe(75);
  const problem = JSON.parse(lost.stdout) as { retryable: boolean; idempotencyKey: string };
  expect(problem.retryable).toBe(true);
  expect(await counts(db.sql)).toMatchObject({ charges: 1, keys: 1 });
  const stored = JSON.parse(readFileSync(keys, "utf8")) as Record<string, { idempotencyKey: string }>;
  expect(stored["checkout:order-1001"]?.idempotencyKey).toBe(problem.idempotencyKey);

  fate = "pass";
  const resumed = await runToExit(["bun", "examples/checkout.ts", "order-1001", "2500"], env);
  expect(resumed.code).toBe(0);
  expect(JSON.parse(resumed.stdout)).toMatchObject({ order: "order-1001", amountCents: 2500, replayed: true, attempts: 1 });
  expect(await counts(db.sql)).toMatchObject({ charges: 1, keys: 1 });

  const otherAmount = await runToExit(["bun", "examples/checkout.ts", "order-1001", "2600"], env);
  expect(otherAmount.code).toBe(1);
  expect(JSON.parse(otherAmount.stdout)).toMatchObject({ problem: "urn:charges-outbox:client:intent-body-conflict", retryable: false });
});
