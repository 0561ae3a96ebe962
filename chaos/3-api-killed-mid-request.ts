// Scenario 3: the API is SIGKILLed while a request is held inside its statement (held as in
// scenario 2a, behind an uncommitted key row of the harness). The dead API's backend is
// terminated too (a dead host's connection), the hold is released, and the client retries
// with the same key against a restarted API. Proves: nothing half-written survives, and the
// retry creates exactly one charge.
import { backendsOf, holdKey, terminateBackends, waitForBackendOnLock } from "../testkit/database.ts";
import { API_APP } from "../testkit/processes.ts";
import { hardKill, startApi, startRelay } from "./lib/harness.ts";
import { postCharge, postUntilFinal } from "./lib/client.ts";
import { deliveryInvariants, scenario } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";

await scenario("3", "API killed while a request is inside its statement", async (ctx) => {
  const { sql, checks, tally } = ctx;
  let api = await startApi(ctx.db.url, ctx.prefix);
  ctx.sub = await startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer);
  await startRelay(ctx.db.url, ctx.prefix);

  const key = crypto.randomUUID();
  const hold = await holdKey(sql, key);
  try {
    const inFlight = postCharge(api.base, key, 7700, tally);
    await waitForBackendOnLock(sql, API_APP);
    const orphans = await backendsOf(sql, API_APP);
    await hardKill(api.child);
    await terminateBackends(sql, orphans);
    const cut = await inFlight;
    checks.check(cut.status === 0, "the client saw the connection cut (no answer)", `status ${cut.status}`);
  } finally {
    await hold.release();
  }
  const [left] = await sql<{ keys: number; charges: number; events: number }[]>`
    select (select count(*)::int from idempotency_keys) as keys,
           (select count(*)::int from charges) as charges,
           (select count(*)::int from outbox) as events`;
  checks.check(left?.keys === 0 && left.charges === 0 && left.events === 0, "no partial rows: no key, charge or outbox row left",
    JSON.stringify(left));

  api = await startApi(ctx.db.url, ctx.prefix, api.port);
  const retry = await postUntilFinal(() => api.base, key, 7700, tally, Date.now() + 10_000);
  checks.check(retry.status === 201, "the retry with the same key succeeds", `status ${retry.status}`);
  const again = await postCharge(api.base, key, 7700, tally);
  checks.check(again.replayed && again.body === retry.body, "a further retry is a byte-identical replay");

  const totals = await deliveryInvariants(ctx);
  checks.check(totals.charges === 1 && totals.outbox === 1, "exactly one charge and one outbox row", `${totals.charges} charges, ${totals.outbox} rows`);
  return totals;
});
