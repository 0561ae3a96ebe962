// Scenario 4: under load, every backend of the API and the relay (application_name
// charges-api / charges-relay) is killed with pg_terminate_backend, several times. Clients
// retry with the same key on 409, 503 or no answer. Proves: both processes recover on their
// own, no request is answered 500, every key ends with one charge, every accepted charge is
// delivered.
import { API_APP, RELAY_APP } from "../testkit/processes.ts";
import { sleep } from "../testkit/wait.ts";
import { startApi, startRelay } from "./lib/harness.ts";
import { postCharge, postUntilFinal, type Answer } from "./lib/client.ts";
import { deliveryInvariants, scenario } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";

const LOAD_MS = 8_000;
const KILLS = 5;
const WORKERS = 6;
// Paced so the subscriber (one inbox transaction per event) keeps up within the scenario's budget.
const PAUSE_MS = 120;

await scenario("4", "database connections killed under load", async (ctx) => {
  const { sql, checks, tally } = ctx;
  const api = await startApi(ctx.db.url, ctx.prefix);
  ctx.sub = await startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer);
  const relay = await startRelay(ctx.db.url, ctx.prefix);

  const stopAt = Date.now() + LOAD_MS;
  const finals = new Map<string, Answer>();
  const worker = async (w: number): Promise<void> => {
    for (let i = 0; Date.now() < stopAt; i++) {
      const key = crypto.randomUUID();
      finals.set(key, await postUntilFinal(() => api.base, key, 100 + w * 1000 + i, tally, Date.now() + 15_000));
      await sleep(PAUSE_MS);
    }
  };
  let killed = 0;
  const killer = async (): Promise<void> => {
    for (let k = 0; k < KILLS; k++) {
      await sleep(LOAD_MS / (KILLS + 1));
      const rows = await sql<{ n: number }[]>`
        select count(*)::int as n from (
          select pg_terminate_backend(pid) from pg_stat_activity
           where datname = current_database() and application_name in (${API_APP}, ${RELAY_APP})) t`;
      killed += rows[0]?.n ?? 0;
    }
  };
  await Promise.all([killer(), ...Array.from({ length: WORKERS }, (_, w) => worker(w))]);
  checks.check(killed >= KILLS * 2, `${KILLS} rounds terminated ${killed} API and relay backends`, `${killed} terminated`);

  checks.check(!api.child.exited, "the API process survived the terminations", `exit code ${api.child.exitCode}`);
  const after = await postCharge(api.base, crypto.randomUUID(), 4242, tally);
  checks.check(after.status === 201, "the API recovered: a new charge after the kills is a 201", `status ${after.status}`);
  const ready = await fetch(`${api.base}/readyz`).then((r) => r.status, () => 0);
  checks.check(ready === 200, "the API reports ready", `readyz ${ready}`);

  const s500 = tally.count((a) => a.status >= 500 && a.status !== 503);
  checks.check(s500 === 0, "no 500 (a database fault is a 503 at most)", `${s500} answers 5xx other than 503`);
  const unsettled = [...finals.values()].filter((a) => a.status !== 201).length;
  checks.check(unsettled === 0, "every key ended with a 201 after the client's retries", `${unsettled} keys without one`);
  const relayAlive = !relay.exited;
  checks.check(relayAlive, "the relay process survived the terminations", `relay exited with ${relay.exitCode}`);
  // A crashed relay is replaced so the delivery checks below still say whether rows were lost.
  if (!relayAlive) await startRelay(ctx.db.url, ctx.prefix);
  // Relay recovery is proven by delivery: the rows written after the kills need a live relay.
  const totals = await deliveryInvariants(ctx, 20_000);
  checks.check(totals.charges === finals.size + 1, "one charge per key", `${totals.charges} charges for ${finals.size + 1} keys`);
  return totals;
});
