// What `bun run dev` prints works as printed, in every mode it prints it in: the real dev mode
// (on this machine's Postgres and broker), its curls run by a shell and its TypeScript snippet
// pasted into a file of this project, by default (through the processor simulator), with
// AUTH_MODE=none (no token anywhere) and with PAYMENT_PROCESSOR=none (no simulator at all).
// And `bun run token` mints only what that API accepts.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ROOT, runToExit } from "../testkit/processes.ts";
import { printedCurls, printedSnippet, startDev, type DevRun } from "./docs-dev.ts";

setDefaultTimeout(120_000);

// Inside the project, where `charges-outbox/client` resolves as it does for a user's file.
await mkdir(join(ROOT, ".data"), { recursive: true });
const folder = await mkdtemp(join(ROOT, ".data", "banner-"));
afterAll(() => rm(folder, { recursive: true, force: true }));

interface Answer {
  readonly status: number;
  readonly replayed: boolean;
}

/** Runs a printed curl line in a shell, as pasted; its status line and replay header. */
async function paste(curl: string): Promise<Answer> {
  const run = await runToExit(["sh", "-c", curl]);
  expect(run.code).toBe(0);
  const status = Number(run.stdout.match(/^HTTP\/[\d.]+ (\d{3})/)?.[1]);
  return { status, replayed: /^idempotent-replayed: true\r?$/im.test(run.stdout) };
}

/** The snippet as printed, in a file, run with Bun: its output lines. */
async function runSnippet(run: DevRun, name: string): Promise<string[]> {
  const file = join(folder, `${name}.ts`);
  await writeFile(file, `${printedSnippet(run)}\nconsole.log(JSON.stringify({ amountCents: charge.amountCents, replayed, attempts }));\n`);
  const result = await runToExit(["bun", file]);
  expect(result.stderr).toBe("");
  expect(result.code).toBe(0);
  return result.stdout.trim().split("\n");
}

async function chargeCount(run: DevRun): Promise<number> {
  const [row] = await run.db.sql<{ n: number }[]>`select count(*)::int as n from charges`;
  return row!.n;
}

describe("bun run dev (through the processor simulator)", () => {
  let run: DevRun;
  test("starts, with the simulator, and prints a curl with a token and a payment method", async () => {
    run = await startDev("banner_default");
    expect(run.lines.some((line) => line.startsWith("processor "))).toBe(true);
    expect(run.token).toBeDefined();
    const [first] = printedCurls(run);
    expect(first).toContain(`${run.api}/charges`);
    expect(first).toContain('"paymentMethod": "pm_card_visa"');
  });

  test("its curl, pasted twice, is one charge: 201, then the same answer replayed", async () => {
    const [curl] = printedCurls(run);
    expect(await paste(curl!)).toEqual({ status: 201, replayed: false });
    expect(await paste(curl!)).toEqual({ status: 201, replayed: true });
  });

  test("its declined card's curl is the stored 402", async () => {
    const declined = printedCurls(run)[1]!;
    expect(declined).toContain("pm_card_chargeDeclined");
    expect(await paste(declined)).toEqual({ status: 402, replayed: false });
    expect(await paste(declined)).toEqual({ status: 402, replayed: true });
  });

  test("its TypeScript snippet creates a charge, then authorizes and captures another", async () => {
    const before = await chargeCount(run);
    const [capture, json] = await runSnippet(run, "default");
    expect(capture).toBe("authorized succeeded 3000");
    expect(JSON.parse(json!)).toEqual({ amountCents: 4900, replayed: false, attempts: 1 });
    expect(await chargeCount(run)).toBe(before + 2);
  });

  test("bun run token mints a token this API accepts, and refuses the implicit tenant with a reason", async () => {
    const minted = await runToExit(["bun", "run", "--silent", "token", "acme"], { AUTH_JWT_SECRET: undefined });
    expect(minted.code).toBe(0);
    const get = await fetch(`${run.api}/charges/${crypto.randomUUID()}`, { headers: { authorization: `Bearer ${minted.stdout.trim()}` } });
    // Authenticated: the charge is unknown to acme, not the request unauthorized.
    expect(get.status).toBe(404);
    const refused = await runToExit(["bun", "run", "--silent", "token", "default"], { AUTH_JWT_SECRET: undefined });
    expect(refused.code).toBe(1);
    expect(refused.stdout).toBe("");
    expect(refused.stderr).toMatch(/^token: the tenant "default" belongs to AUTH_MODE=none.*\n$/);
  });

  test("stops on SIGTERM with exit code 0", async () => {
    expect(await run.stop()).toBe(0);
  });
});

describe("AUTH_MODE=none bun run dev", () => {
  let run: DevRun;
  test("prints a curl and a snippet with no token", async () => {
    run = await startDev("banner_noauth", { AUTH_MODE: "none" });
    expect(run.token).toBeUndefined();
    expect(run.banner.join("\n")).not.toContain("Authorization");
    expect(printedSnippet(run)).toContain(`new ChargesClient({ baseUrl: "${run.api}" })`);
  });

  test("its curl and its snippet work as printed, as the implicit tenant", async () => {
    expect(await paste(printedCurls(run)[0]!)).toEqual({ status: 201, replayed: false });
    const [capture, json] = await runSnippet(run, "noauth");
    expect(capture).toBe("authorized succeeded 3000");
    expect(JSON.parse(json!)).toMatchObject({ amountCents: 4900, attempts: 1 });
    const tenants = await run.db.sql<{ tenant: string }[]>`select distinct tenant from charges`;
    expect(tenants.map((t) => t.tenant)).toEqual(["default"]);
  });

  test("bun run token says the API takes no token", async () => {
    const refused = await runToExit(["bun", "run", "--silent", "token", "acme"], { AUTH_MODE: "none" });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("AUTH_MODE=none: the API takes no token");
  });

  test("stops", async () => {
    expect(await run.stop()).toBe(0);
  });
});

describe("PAYMENT_PROCESSOR=none bun run dev", () => {
  let run: DevRun;
  test("runs no simulator and prints the ledger's curl, with no payment method", async () => {
    run = await startDev("banner_ledger", { PAYMENT_PROCESSOR: "none" });
    expect(run.lines.filter((line) => line.startsWith("processor "))).toEqual([]);
    expect(run.banner.join("\n")).not.toContain("simulator");
    const curls = printedCurls(run);
    expect(curls).toHaveLength(1);
    expect(curls[0]).toContain(`-d '{"amountCents": 4900}'`);
    expect(await paste(curls[0]!)).toEqual({ status: 201, replayed: false });
    const [capture] = await runSnippet(run, "ledger");
    expect(capture).toBe("authorized succeeded 3000");
  });

  test("stops", async () => {
    expect(await run.stop()).toBe(0);
  });
});
