// Scenario 5: the MQTT broker restarts while the relay drains. A private Mosquitto (own port,
// persistence on) is stopped and started again while clients keep writing charges; rows
// written while it is away pile up in the outbox. Proves: the relay survives the restart,
// waits instead of burning attempts, drains the backlog, and every event reaches the
// subscriber at least once.
import { privateMosquitto } from "../testkit/mosquitto.ts";
import { sleep } from "../testkit/wait.ts";
import { startApi, startRelay } from "./lib/harness.ts";
import { postUntilFinal } from "./lib/client.ts";
import { deliveryInvariants, scenario } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";

const LOAD_MS = 6_000;
const DOWN_MS = 1_500;
const WORKERS = 4;

await scenario("5", "broker restart during a drain", async (ctx) => {
  const { sql, checks, tally } = ctx;
  // The subscriber's session queue must not overflow during the scenario: no drop by the broker.
  const broker = await privateMosquitto("max_queued_messages 100000");
  const api = await startApi(ctx.db.url, ctx.prefix);
  ctx.sub = await startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer, broker.url);
  const relay = await startRelay(ctx.db.url, ctx.prefix, broker.url);

  const stopAt = Date.now() + LOAD_MS;
  const worker = async (w: number): Promise<void> => {
    for (let i = 0; Date.now() < stopAt; i++) {
      await postUntilFinal(() => api.base, crypto.randomUUID(), 1 + w * 10_000 + i, tally, Date.now() + 10_000);
      await sleep(40);
    }
  };
  let downFrom = "";
  let downTo = "";
  const restart = async (): Promise<void> => {
    await sleep(LOAD_MS / 3);
    downFrom = new Date().toISOString();
    await broker.stop();
    await sleep(DOWN_MS);
    await broker.start();
    downTo = new Date().toISOString();
  };
  await Promise.all([restart(), ...Array.from({ length: WORKERS }, (_, w) => worker(w))]);

  const [during] = await sql<{ n: number }[]>`
    select count(*)::int as n from outbox where created_at between ${downFrom}::timestamptz and ${downTo}::timestamptz`;
  checks.check((during?.n ?? 0) > 0, "charges were written while the broker was away (a backlog to drain)", `${during?.n ?? 0} rows`);
  const totals = await deliveryInvariants(ctx, 20_000);
  checks.check(!relay.exited, "the relay process survived the broker restart", `exit ${relay.exitCode}`);
  checks.check(!ctx.sub.child.exited, "the subscriber survived the broker restart");
  const [parked] = await sql<{ n: number }[]>`select count(*)::int as n from outbox where parked_at is not null`;
  checks.check((parked?.n ?? 0) === 0, "no row was parked by the outage", `${parked?.n} parked`);
  checks.check(tally.count((a) => a.status >= 500 || a.status === 0) === 0, "the API never failed (it does not need the broker)");
  return totals;
});
