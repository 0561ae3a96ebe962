// What `bun run dev`'s banner tells a newcomer to run works as printed: its TypeScript snippet,
// pasted into a file of this project and run with Bun against a real API, creates one charge
// with the client, and its curl's body and headers are the contract's.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { banner } from "../dev/output.ts";
import { freshDatabase } from "../testkit/services.ts";
import { killAll, ROOT, runToExit, startEntrypoint } from "../testkit/processes.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("dev_banner");
const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, API_POOL_SIZE: "2", ...authEnv() } });
// Inside the project, where `charges-outbox/client` resolves as it does for a user's file.
await mkdir(join(ROOT, ".data"), { recursive: true });
const folder = await mkdtemp(join(ROOT, ".data", "banner-"));
afterAll(async () => {
  await killAll();
  await db.drop();
  await rm(folder, { recursive: true, force: true });
});

function printed(): string[] {
  return banner({
    api: api.base,
    relay: "http://127.0.0.1:9465",
    databaseUrl: db.url,
    databaseNote: "",
    databaseDirectUrl: undefined,
    mqttUrl: "mqtt://127.0.0.1:1883",
    mqttNote: "",
    authorization: `Bearer ${TOKEN}`,
    authNote: "",
  });
}
const TOKEN = await tokenFor();

test("the TypeScript snippet, run as printed, creates one charge through the client", async () => {
  const lines = printed();
  const start = lines.findIndex((line) => line.startsWith("or from TypeScript"));
  expect(start).toBeGreaterThan(0);
  const code = lines.slice(start + 1).map((line) => line.replace(/^ {2}/, ""));
  const file = join(folder, "snippet.ts");
  await writeFile(file, [...code, "console.log(JSON.stringify({ id: charge.id, amountCents: charge.amountCents, replayed, attempts }));", ""].join("\n"));
  const run = await runToExit(["bun", file]);
  expect(run.stderr).toBe("");
  expect(run.code).toBe(0);
  const [capture, json] = run.stdout.trim().split("\n");
  // Authorize, then capture 3000 of it.
  expect(capture).toBe("authorized succeeded 3000");
  const answer = JSON.parse(json!) as { id: string; amountCents: number; replayed: boolean; attempts: number };
  expect(answer).toMatchObject({ amountCents: 4900, replayed: false, attempts: 1 });
  const rows = await db.sql<{ amount_cents: number }[]>`select amount_cents from charges where id = ${answer.id}::uuid`;
  expect(rows.map((r) => r.amount_cents)).toEqual([4900]);
});

test("the curl carries the token, a fresh key and the seed's body", () => {
  const curl = printed().find((line) => line.includes("curl -i -X POST"))!;
  expect(curl).toContain(`${api.base}/charges`);
  expect(curl).toContain(`-H 'Authorization: Bearer ${TOKEN}'`);
  expect(curl).toMatch(/-H 'Idempotency-Key: [0-9a-f-]{36}'/);
  expect(curl).toContain(`-d '{"amountCents": 4900}'`);
});
