// The package as a Node 20 user installs it: `npm pack` of this checkout, `npm install` of the
// tarball into a scratch project, and there a plain JavaScript program (node, no build step of
// its own) that imports charges-outbox/subscriber and charges-outbox/client by name, charges
// through the client against a running API and relay, and writes one row per event in its own
// database through the subscriber. Its TypeScript declarations are checked the way Node users
// read them (moduleResolution nodenext).
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, readdirSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../testkit/database.ts";
import { installPacked, placeProgram, type Installed } from "../testkit/package.ts";
import { ROOT, spawnChild, startEntrypoint, type Service } from "../testkit/processes.ts";
import { services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

// npm install from the registry (or its cache) and the bundles on a loaded machine.
setDefaultTimeout(240_000);

const { adminDatabaseUrl, mqttUrl } = await services();
let installed: Installed;
let serviceDb: ScratchDatabase;
let subscriberDb: ScratchDatabase;
const started: Service[] = [];
const prefix = `test/${crypto.randomUUID()}/`;

beforeAll(async () => {
  [installed, serviceDb, subscriberDb] = await Promise.all([
    installPacked(),
    createScratchDatabase(adminDatabaseUrl, scratchName("t", "package_service")),
    // The subscriber's own database: empty, migrated by the library alone.
    createScratchDatabase(adminDatabaseUrl, scratchName("t", "package_subscriber"), { migrate: false }),
  ]);
  const env = { DATABASE_URL: serviceDb.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, LOG_LEVEL: "warn", ...authEnv() };
  started.push(await startEntrypoint("api", { env }), await startEntrypoint("relay", { env, readyPath: false }));
});
afterAll(async () => {
  await Promise.all(started.map((s) => s.child.stop()));
  await Promise.all([installed?.remove(), serviceDb?.drop(), subscriberDb?.drop()]);
});

test("the tarball holds the client and the subscriber, not the tests, benches or chaos", () => {
  const root = join(installed.dir, "node_modules/charges-outbox");
  expect(readdirSync(root).sort()).toEqual(["README.md", "client", "dist", "docs", "lib", "package.json"]);
  expect(readdirSync(join(root, "lib")).sort()).toEqual(["charges", "platform", "subscriber"]);
  expect(existsSync(join(root, "dist/subscriber/index.js"))).toBe(true);
  expect(existsSync(join(root, "client/dist/index.js"))).toBe(true);
  expect(installed.tarball.files).toBeLessThan(150);
});

test("node runs a subscriber and the client from the installed package: one row per event in the subscriber's own table", async () => {
  const program = await placeProgram(installed, join(ROOT, "test/fixtures/subscriber-node.mjs"), "subscriber.mjs");
  const lines: Record<string, unknown>[] = [];
  const child = spawnChild(["node", program], {
    name: "node subscriber",
    cwd: installed.dir,
    env: { DATABASE_URL: subscriberDb.url, MQTT_URL: mqttUrl, PREFIX: prefix, CONSUMER: "package-test", API_URL: started[0]!.base, API_TOKEN: await tokenFor(), CHARGE_AMOUNTS: "1111,2222" },
    stdout: (line) => lines.push(JSON.parse(line) as Record<string, unknown>),
  });
  try {
    await waitUntil(() => lines.filter((l) => l.event === "received").length >= 2 || child.exited, 60_000, "two events received");
    expect(child.exited).toBe(false);
    const charged = lines.filter((l) => l.event === "charged").map((l) => l.id);
    expect(charged).toHaveLength(2);
    const rows = await subscriberDb.sql<{ chargeId: string; type: string }[]>`select charge_id as "chargeId", type from consumed order by n`;
    expect([...rows].map((r) => r.chargeId).sort()).toEqual([...charged].sort() as string[]);
    expect(new Set(rows.map((r) => r.type))).toEqual(new Set(["ChargeCreated"]));
  } finally {
    child.kill("SIGTERM");
  }
  expect(await child.done).toBe(0);
  expect(lines.at(-1)).toMatchObject({ event: "stopped", processed: 2, duplicates: 0, malformed: 0 });
});

test("TypeScript on Node (nodenext) reads the package's declarations: the events are typed by their type", async () => {
  const source = `import { createSubscriber, type ChargeEvent } from "charges-outbox/subscriber";
import { ChargesClient } from "charges-outbox/client";
import postgres from "postgres";
export const amount = (event: ChargeEvent): number => (event.type === "ChargeCreated" ? event.data.amountCents : 0);
// @ts-expect-error a ChargeCanceled event has no amount
export const wrong = (event: Extract<ChargeEvent, { type: "ChargeCanceled" }>): number => event.data.amountCents;
export const make = () => createSubscriber({ mqttUrl: "mqtt://x", sql: postgres(), consumer: "c", handle: async (event, tx) => void (await tx\`select \${event.id}\`) });
export const client = new ChargesClient({ baseUrl: "http://x", token: "t" });
`;
  await writeFile(join(installed.dir, "check.ts"), source);
  const config = { compilerOptions: { module: "nodenext", moduleResolution: "nodenext", target: "es2022", strict: true, noEmit: true, skipLibCheck: true, types: [] }, files: ["check.ts"] };
  await writeFile(join(installed.dir, "tsconfig.json"), JSON.stringify(config));
  const tsc = Bun.spawn([join(ROOT, "node_modules/.bin/tsc"), "-p", installed.dir], { cwd: installed.dir, stdout: "pipe", stderr: "pipe" });
  const [out, code] = await Promise.all([new Response(tsc.stdout).text(), tsc.exited]);
  expect(out).toBe("");
  expect(code).toBe(0);
});
