// The operator console in a real browser: Debian's Chromium, driven by playwright-core, signs
// in through the link `bun run dev` prints, finds a charge by each of the four ids, sees a
// parked key and resolves it with a reason, sees a parked outbox row, requeues it and sees it
// published, exports a list, and watches the backlog chart move without a reload. Each test
// checks what the page shows and what the database holds after, and fails on any error in the
// page's console. Skipped only where Chromium is not installed (CI installs it).
// CONSOLE_SCREENSHOTS=<dir> also saves the two screenshots docs/console.md shows: charge and confirm.
import { afterAll, afterEach, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { chromiumBinary } from "../testkit/chromium.ts";
import { postCharge } from "../testkit/api.ts";
import { mintTestToken } from "../testkit/auth.ts";
import { chargeWith, expireLease, keyState, processorEnv, processorTestContext } from "../testkit/processor.ts";
import { services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";
import { loadConfig } from "../lib/platform/config.ts";
import { startRelay, type RelayProcess } from "../lib/relay/start.ts";
import { OPERATOR_SCOPE } from "../dev/token.ts";

setDefaultTimeout(90_000);

const binary = chromiumBinary();
const SHOTS = process.env.CONSOLE_SCREENSHOTS;
const OPERATOR = "ops-carol";
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"];

const { db, sim, api } = await processorTestContext("console_browser", 3000);
const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: (request) => api.fetch(request) });
const base = `http://127.0.0.1:${server.port}`;
let profile = "";
let context: BrowserContext;
let page: Page;
let relay: RelayProcess | undefined;
const pageErrors: string[] = [];

beforeAll(async () => {
  if (!binary) return;
  profile = await mkdtemp(path.join(tmpdir(), "console-chromium-"));
  context = await chromium.launchPersistentContext(profile, { executablePath: binary, headless: true, args: FLAGS, viewport: { width: 1100, height: 760 } });
  page = context.pages()[0] ?? (await context.newPage());
  page.on("console", (m) => void (m.type() === "error" && pageErrors.push(m.text())));
  page.on("pageerror", (e) => void pageErrors.push(String(e)));
  page.on("dialog", (d) => void (pageErrors.push(`dialog: ${d.message()}`), d.dismiss()));
  const token = await mintTestToken({ tenant: OPERATOR, scope: OPERATOR_SCOPE });
  await page.goto(`${base}/console/sign-in?token=${token}`);
  expect(new URL(page.url()).pathname).toBe("/console");
});
afterEach(() => {
  expect(pageErrors.splice(0)).toEqual([]);
});
afterAll(async () => {
  await relay?.stop();
  await relay?.close();
  await context?.close();
  if (profile) await rm(profile, { recursive: true, force: true });
  server.stop(true);
});

const browserTest = binary ? test : test.skip;

async function shot(name: string): Promise<void> {
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, `${name}.png`) });
}

/** A charge through the processor simulator: its id, key, payment id and event id. */
async function charge(key = `order-${crypto.randomUUID()}`): Promise<{ key: string; chargeId: string; paymentId: string; eventId: string }> {
  const res = await postCharge(api, chargeWith(2500), { key });
  expect(res.status).toBe(201);
  const chargeId = ((await res.json()) as { id: string }).id;
  const [row] = await db.sql<{ payment: string; event: string }[]>`
    select c.processor_payment_id as payment, o.id::text as event from charges c join outbox o on o.aggregate_id = c.id where c.id = ${chargeId}::uuid`;
  return { key, chargeId, paymentId: row!.payment, eventId: row!.event };
}

async function parkRow(chargeId: string): Promise<string> {
  const [row] = await db.sql<{ id: string }[]>`
    update outbox set parked_at = now(), attempts = 10, last_error = 'PUBACK 153: payload format invalid'
     where aggregate_id = ${chargeId}::uuid returning id::text`;
  return row!.id;
}

async function find(q: string, tenant = ""): Promise<void> {
  await page.goto(`${base}/console`);
  await page.fill("form.find input[name=q]", q);
  await page.fill("form.find input[name=tenant]", tenant);
  await Promise.all([page.waitForURL(/\/console\/(charges|find)/), page.click("form.find button")]);
}

browserTest("find a charge by its key (with its tenant), its id, its processor payment id and its event id", async () => {
  const c = await charge();
  for (const [q, tenant] of [[c.key, "tenant-a"], [c.chargeId, ""], [c.paymentId, ""], [c.eventId, ""]] as const) {
    await find(q, tenant);
    expect({ q, path: new URL(page.url()).pathname }).toEqual({ q, path: `/console/charges/${c.chargeId}` });
    expect(await page.textContent("h1")).toBe(`Charge ${c.chargeId}`);
    expect(await page.locator("code.key-text").first().textContent()).toBe(c.key);
  }
  expect(await page.locator("table").first().textContent()).toContain(c.paymentId);
  await shot("charge");
  // What a tenant wrote is text: a key of markup shows as its characters, and nothing runs.
  const markup = '"<img src=x onerror=alert(1)>"';
  await db.sql`update idempotency_keys set key = ${markup} where key = ${c.key}`;
  await page.goto(`${base}/console/charges/${c.chargeId}`);
  expect(await page.locator("code.key-text").first().textContent()).toBe(markup);
  expect(await page.locator("main img").count()).toBe(0);
});

browserTest("see a parked key, resolve it with a reason: the processor is read, the key completes, the audit row holds who and why", async () => {
  const key = crypto.randomUUID();
  sim.setFaults({ rules: [{ kind: "500-after", op: "confirm", times: 1 }] });
  expect((await postCharge(api, chargeWith(1500), { key })).status).toBe(502);
  sim.clearFaults();
  await expireLease(db.sql, key);
  await db.sql`update idempotency_keys set parked_at = now(), last_error = 'outcome unknown past the resolve window' where key = ${key}`;
  const chargeId = String((await keyState(db.sql, key))!.resume!.chargeId);

  await page.goto(`${base}/console/lists/parked-keys`);
  const row = page.locator("tr", { hasText: chargeId });
  expect(await row.count()).toBe(1);
  expect(await row.textContent()).toContain("outcome unknown past the resolve window");
  await row.locator("form[data-action=resolve] input[name=reason]").fill("processor shows it confirmed; INC-42");
  await Promise.all([page.waitForURL(`${base}/console/actions`), row.locator("form[data-action=resolve] button").click()]);
  expect(await page.textContent("#result")).toContain(`resolve ${chargeId}: done`);

  expect(await keyState(db.sql, key)).toMatchObject({ status: "COMPLETED", response_status: 201, parked: false });
  const [c] = await db.sql<{ status: string }[]>`select status from charges where id = ${chargeId}::uuid`;
  expect(c!.status).toBe("succeeded");
  const audit = await db.sql`select actor, via, action, target, reason, outcome->>'outcome' as outcome from operator_audit where target = ${chargeId}`;
  expect([...audit]).toEqual([{ actor: OPERATOR, via: "console", action: "resolve", target: chargeId, reason: "processor shows it confirmed; INC-42", outcome: "succeeded" }]);
  await page.goto(`${base}/console/charges/${chargeId}`);
  expect(await page.locator("article.key").textContent()).toContain("done: answer stored");
});

browserTest("see a parked outbox row, requeue it with a reason, and see it published", async () => {
  const c = await charge();
  const rowId = await parkRow(c.chargeId);
  await page.goto(`${base}/console/lists/parked-rows`);
  const row = page.locator("tr", { hasText: rowId });
  expect(await row.textContent()).toContain("PUBACK 153: payload format invalid");
  await row.locator("form[data-action=requeue] input[name=reason]").fill("broker limit raised");
  await Promise.all([page.waitForURL(`${base}/console/actions`), row.locator("form[data-action=requeue] button").click()]);
  expect(await page.textContent("#result")).toContain(`requeue ${rowId}: done`);
  const [requeued] = await db.sql<{ parked: boolean; attempts: number }[]>`select parked_at is not null as parked, attempts from outbox where id = ${rowId}::uuid`;
  expect(requeued).toEqual({ parked: false, attempts: 0 });

  const { mqttUrl } = await services();
  relay = await startRelay(loadConfig({ DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: `test/${crypto.randomUUID()}/`, LOG_LEVEL: "warn", ...processorEnv(sim) }));
  void relay.run();
  await waitUntil(async () => {
    await page.goto(`${base}/console/charges/${c.chargeId}`);
    return (await page.locator("tr", { hasText: rowId }).textContent())?.includes("published");
  }, 20_000, "the requeued row shown as published");
  const [published] = await db.sql<{ published: boolean }[]>`select published_at is not null as published from outbox where id = ${rowId}::uuid`;
  expect(published!.published).toBe(true);
  expect([...(await db.sql`select action, reason from operator_audit where target = ${rowId}`)]).toEqual([{ action: "requeue", reason: "broker limit raised" }]);
});

browserTest("export a filtered list as CSV: the file holds the rows the database holds", async () => {
  await relay?.stop();
  const a = await charge();
  const b = await charge();
  const rowA = await parkRow(a.chargeId);
  await parkRow(b.chargeId);
  await db.sql`update outbox set tenant = 'tenant-b' where aggregate_id = ${b.chargeId}::uuid`;
  await page.goto(`${base}/console/lists/parked-rows?tenant=tenant-a`);
  expect(await page.textContent("#total")).toBe("1");
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#export")]);
  const csv = await readFile((await download.path())!, "utf8");
  const lines = csv.trimEnd().split("\r\n");
  expect(lines[0]).toBe("id,tenant,aggregateId,sequence,eventType,attempts,lastError,createdAt,parkedAt,blockedBy");
  const [db0] = await db.sql<{ parked_at: Date; created_at: Date }[]>`select parked_at, created_at from outbox where id = ${rowA}::uuid`;
  expect(lines.slice(1)).toEqual([`${rowA},tenant-a,${a.chargeId},1,ChargeCreated,10,PUBACK 153: payload format invalid,${db0!.created_at.toISOString()},${db0!.parked_at.toISOString()},`]);
  // The list-wide action shows its count before anything is done.
  await page.click("form[data-list-action=requeue] button");
  expect(await page.textContent("#count")).toContain("This will requeue 1 entry");
  await shot("confirm");
});

browserTest("the backlog chart follows the outbox without a reload", async () => {
  await page.goto(`${base}/console`);
  await page.waitForSelector("#backlog[data-state=live]");
  expect(await page.locator("#backlog-chart rect").count()).toBe(15);
  const before = Number(await page.textContent("[data-k=pending]"));
  const c = await charge();
  const published = await db.sql`select 1 from outbox where aggregate_id = ${c.chargeId}::uuid and published_at is null`;
  expect(published.length).toBe(1);
  await page.waitForFunction((n) => Number(document.querySelector("[data-k=pending]")?.textContent) === n, before + 1, { timeout: 10_000 });
});
