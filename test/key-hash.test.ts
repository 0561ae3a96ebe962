// keyHash in the logs is an HMAC under API_KEY_HASH_SECRET, so a guessable key (`order-12345`)
// cannot be recovered by hashing a dictionary. Real `bun api.ts` processes: with the secret,
// two processes (or two starts) log the same hash for a key; without it, each start makes a
// random key and says so in one line, and the secret never reaches the output.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { createHash, createHmac } from "node:crypto";
import { freshDatabase } from "../testkit/services.ts";
import { startEntrypoint, type Service } from "../testkit/processes.ts";
import { authEnv, authHeaders } from "../testkit/auth.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("key_hash");
const started: Service[] = [];
afterAll(async () => {
  await Promise.all(started.map((api) => api.child.stop()));
  await db.drop();
});

const SECRET = "a-deployment-secret-of-at-least-32-bytes";
const KEY = "order-12345";
const NO_SECRET_LINE = "API_KEY_HASH_SECRET is not set: keyHash in the logs uses a random key made at start, so hashes will not match across restarts or processes";

interface Run {
  readonly lines: Record<string, unknown>[];
  readonly text: string[];
}

/** Starts api.ts with `env`, sends one charge with KEY and returns its output lines once it logged the request. */
async function run(env: Record<string, string>): Promise<Run> {
  const text: string[] = [];
  const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, LOG_LEVEL: "info", API_POOL_SIZE: "2", ...authEnv(), ...env }, stdout: (line) => text.push(line) });
  started.push(api);
  const res = await fetch(`${api.base}/charges`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": KEY, ...(await authHeaders()) },
    body: '{"amountCents":4900}',
  });
  expect([200, 201]).toContain(res.status);
  await res.arrayBuffer();
  await api.child.stop();
  return { text, lines: text.filter((line) => line.startsWith("{")).map((line) => JSON.parse(line) as Record<string, unknown>) };
}

const hashOf = (r: Run): unknown => r.lines.find((line) => line.msg === "request" && line.route === "/charges")?.keyHash;

test("with API_KEY_HASH_SECRET: the HMAC's first 12 hex digits, the same in every process, no warning, the secret never printed", async () => {
  const first = await run({ API_KEY_HASH_SECRET: SECRET });
  const second = await run({ API_KEY_HASH_SECRET: SECRET });
  const expected = createHmac("sha256", SECRET).update(KEY).digest("hex").slice(0, 12);
  expect(hashOf(first)).toBe(expected);
  expect(hashOf(second)).toBe(expected);
  for (const r of [first, second]) {
    expect(r.lines.some((line) => line.msg === NO_SECRET_LINE)).toBe(false);
    expect(r.text.join("\n")).not.toContain(SECRET);
    expect(r.text.join("\n")).not.toContain(KEY);
  }
});

test("without it: one warning line at start, and a hash that is neither the plain SHA-256 nor another start's", async () => {
  const first = await run({ API_KEY_HASH_SECRET: "" });
  const second = await run({ API_KEY_HASH_SECRET: "" });
  for (const r of [first, second]) {
    expect(r.lines.filter((line) => line.msg === NO_SECRET_LINE)).toEqual([expect.objectContaining({ level: "warn" })]);
    expect(hashOf(r)).toMatch(/^[0-9a-f]{12}$/);
    expect(hashOf(r)).not.toBe(createHash("sha256").update(KEY).digest("hex").slice(0, 12));
  }
  expect(hashOf(first)).not.toBe(hashOf(second));
});
