// `bun run ops`'s operator commands, the console's twins, as an operator types them: find,
// show, list, export, audit, backlog, and the audited actions, where a list-wide one prints
// its count and acts only when handed that count back.
import { afterAll, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import { freshDatabase } from "../testkit/services.ts";
import { runToExit, type Finished } from "../testkit/processes.ts";
import { postCharge, startTestApi } from "../testkit/api.ts";
import { authEnv } from "../testkit/auth.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("console_cli");
const api = await startTestApi(db.url);
afterAll(async () => {
  await api.close();
  await db.drop();
});
beforeEach(async () => {
  await db.sql`truncate outbox, idempotency_keys, refunds, charges, operator_audit`;
});

function ops(...args: string[]): Promise<Finished> {
  return runToExit(["bun", "run", "--silent", "ops", ...args], { DATABASE_URL: db.url, LOG_LEVEL: "warn", OPS_ACTOR: "ops-bob", ...authEnv() });
}

const out = (run: Finished) => {
  expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: "" });
  return JSON.parse(run.stdout) as Record<string, unknown>;
};

async function parkedCharge(key: string, tenant = "tenant-a"): Promise<{ chargeId: string; rowId: string }> {
  const res = await postCharge(api, JSON.stringify({ amountCents: 900 }), { key, tenant });
  const chargeId = ((await res.json()) as { id: string }).id;
  const [row] = await db.sql<{ id: string }[]>`update outbox set parked_at = now(), attempts = 10, last_error = 'x' where aggregate_id = ${chargeId}::uuid returning id::text`;
  return { chargeId, rowId: row!.id };
}

test("find, show, list, export and backlog read what the console shows", async () => {
  const { chargeId, rowId } = await parkedCharge("cli-key-1");
  expect(out(await ops("find", "cli-key-1", "--tenant", "tenant-a")).found).toEqual([{ chargeId, tenant: "tenant-a", by: "key", detail: "POST /charges" }]);
  const shown = out(await ops("show", chargeId));
  expect(shown).toMatchObject({ found: true, charge: { id: chargeId }, outbox: [{ id: rowId, state: "parked" }] });
  expect(out(await ops("list", "parked-rows", "--tenant", "tenant-a"))).toMatchObject({ total: 1, rows: [{ id: rowId }] });
  expect(out(await ops("list", "parked-rows", "--tenant", "tenant-b"))).toMatchObject({ total: 0 });
  const csv = await ops("export", "parked-rows");
  expect(csv.stdout.split("\r\n")[1]).toStartWith(`${rowId},tenant-a,${chargeId},1,ChargeCreated,10,x,`);
  expect(out(await ops("backlog"))).toMatchObject({ pending: 0, parked: 1, held: 0 });
  const bad = await ops("list", "everything");
  expect(bad.code).toBe(2);
  expect(bad.stderr.trim().split("\n")).toHaveLength(1);
});

test("actions from the CLI are audited as the console's are; apply shows the count and acts only when given it back", async () => {
  const a = await parkedCharge("cli-key-2");
  const b = await parkedCharge("cli-key-3");
  expect((await ops("discard", a.rowId)).code).toBe(2);
  expect(out(await ops("discard", a.rowId, "--reason", "poison"))).toMatchObject({ done: true, action: "discard" });
  const preview = out(await ops("apply", "requeue", "parked-rows", "--reason", "broker back"));
  expect(preview).toMatchObject({ matched: 1, wouldTouch: 1 });
  expect((await db.sql`select * from outbox where parked_at is not null and published_at is null`).length).toBe(1);
  expect(out(await ops("apply", "requeue", "parked-rows", "--reason", "broker back", "--yes", "1"))).toMatchObject({ done: 1, failed: 0 });
  const audit = out(await ops("audit")).rows as { actor: string; via: string; action: string; target: string; reason: string }[];
  expect(audit.map(({ actor, via, action, target, reason }) => ({ actor, via, action, target, reason }))).toEqual([
    { actor: "ops-bob", via: "cli", action: "requeue", target: b.rowId, reason: "broker back" },
    { actor: "ops-bob", via: "cli", action: "discard", target: a.rowId, reason: "poison" },
  ]);
});
