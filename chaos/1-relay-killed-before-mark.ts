// Scenario 1: the relay is killed after the broker's PUBACK and before its UPDATE of
// published_at. Deterministic: the harness holds `LOCK TABLE outbox IN SHARE MODE` in its own
// transaction; the relay's FOR UPDATE claim (ROW SHARE) and publish go through, its UPDATE
// (ROW EXCLUSIVE) waits. Once the subscriber has the event, the relay is SIGKILLed, its
// orphaned backend is terminated (what a dead host's connection amounts to: the pipelined
// COMMIT already sitting in the socket must not run), the lock is released and a new relay
// starts. Proves at-least-once delivery plus the inbox's exactly-once processing.
import { backendsOf, terminateBackends, waitForBackendOnLock } from "../testkit/database.ts";
import { RELAY_APP } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";
import { hardKill, startApi, startRelay } from "./lib/harness.ts";
import { postCharge } from "./lib/client.ts";
import { deliveryInvariants, scenario } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";

await scenario("1", "relay killed between publish and published_at", async (ctx) => {
  const { sql, checks } = ctx;
  const api = await startApi(ctx.db.url, ctx.prefix);
  ctx.sub = await startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer);
  const sub = ctx.sub;

  const key = crypto.randomUUID();
  const first = await postCharge(api.base, key, 4900, ctx.tally);
  if (first.status !== 201) throw new Error(`the charge was answered ${first.status}: ${first.body}`);
  const [event] = await sql<{ id: string }[]>`select id::text from outbox`;
  if (!event) throw new Error("no outbox row after a 201");

  const lock = await sql.reserve();
  let relay;
  try {
    await lock`begin`;
    await lock`lock table outbox in share mode`;
    // Starts while the SHARE lock is held: its migrate() must skip the DDL (every migration
    // in the ledger), or it never gets ready and the scenario aborts here.
    relay = await startRelay(ctx.db.url, ctx.prefix);
    await waitUntil(() => sub.arrivals.has(event.id), 15_000, "the subscriber to receive the event");
    await waitForBackendOnLock(sql, RELAY_APP);
    const [row] = await sql<{ published: boolean }[]>`select published_at is not null as published from outbox`;
    checks.check(row?.published === false, "event delivered while published_at is still null (the window is open)");
    const orphans = await backendsOf(sql, RELAY_APP);
    await hardKill(relay);
    await terminateBackends(sql, orphans);
  } finally {
    await lock`rollback`.catch(() => {});
    lock.release();
  }
  await startRelay(ctx.db.url, ctx.prefix);
  const again = await waitUntil(() => (sub.arrivals.get(event.id) ?? 0) >= 2, 15_000, "the event to arrive again").catch(() => false);
  checks.check(again === true, "the same event id arrives again after the restart (redelivery observed)",
    `seen ${sub.arrivals.get(event.id) ?? 0} time(s)`);
  checks.check(sub.droppedByInbox() >= 1, "the inbox dropped the redelivery", `${sub.droppedByInbox()} dropped`);

  const retry = await postCharge(api.base, key, 4900, ctx.tally);
  checks.check(retry.status === 201 && retry.replayed && retry.body === first.body, "the client's retry is a byte-identical replay",
    `status ${retry.status}, replayed ${retry.replayed}`);
  const totals = await deliveryInvariants(ctx);
  checks.check(totals.charges === 1 && totals.outbox === 1, "exactly one charge and one outbox row", `${totals.charges} charges, ${totals.outbox} rows`);
  return totals;
});
