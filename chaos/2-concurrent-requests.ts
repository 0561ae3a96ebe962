// Scenario 2: concurrent requests with one Idempotency-Key.
//  (a) the winner is held inside its statement (the harness's own open transaction holds an
//      uncommitted idempotency_keys row with the same key, so the API's insert queues behind
//      it while the API already owns the key's advisory lock): the second request must get a
//      409 at once, while the winner is still held; released, the winner gets its 201.
//  (b) 50 concurrent requests, one key: one charge, one outbox row, exactly one fresh 201,
//      every other answer a 409 or a byte-identical replay.
//  (c) 50 keys × 5 concurrent retries: exactly 50 charges.
import { backendWaitingOnLock, holdKey, waitForBackendOnLock } from "../testkit/database.ts";
import { API_APP } from "../testkit/processes.ts";
import { startApi, startRelay } from "./lib/harness.ts";
import { postCharge, type Answer } from "./lib/client.ts";
import { deliveryInvariants, scenario } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";

await scenario("2", "concurrent requests with the same key", async (ctx) => {
  const { sql, checks, tally } = ctx;
  const api = await startApi(ctx.db.url, ctx.prefix);
  ctx.sub = await startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer);
  await startRelay(ctx.db.url, ctx.prefix);

  // (a)
  const keyA = crypto.randomUUID();
  const hold = await holdKey(sql, keyA);
  let winner: Promise<Answer>;
  let loser: Answer;
  let releasedAt = 0;
  try {
    winner = postCharge(api.base, keyA, 1000, tally);
    await waitForBackendOnLock(sql, API_APP);
    loser = await postCharge(api.base, keyA, 1000, tally, 5000);
    const stillHeld = (await backendWaitingOnLock(sql, API_APP)) !== undefined;
    checks.check(stillHeld, "(a) the winner is still held when the second answer arrives");
  } finally {
    releasedAt = Date.now();
    await hold.release();
  }
  const won = await winner;
  checks.check(loser.status === 409 && loser.at <= releasedAt, "(a) the second request got 409 while the winner was held",
    `status ${loser.status}`);
  checks.check(won.status === 201 && !won.replayed, "(a) the winner got a fresh 201 once released", `status ${won.status}`);

  // (b)
  const keyB = crypto.randomUUID();
  const b = await Promise.all(Array.from({ length: 50 }, () => postCharge(api.base, keyB, 2500, tally)));
  const freshB = b.filter((a) => a.status === 201 && !a.replayed);
  checks.check(freshB.length === 1, "(b) exactly one fresh 201 among 50 concurrent requests", `${freshB.length} fresh`);
  const body = freshB[0]?.body;
  const odd = b.filter((a) => !(a.status === 409 || (a.status === 201 && (!a.replayed || a.body === body))));
  checks.check(odd.length === 0, "(b) every other answer is a 409 or a byte-identical replay",
    odd.map((a) => `${a.status}${a.replayed ? " replay" : ""}`).join(", "));
  const [cb] = await sql<{ charges: number; events: number }[]>`
    select (select count(*)::int from idempotency_keys k join charges c on c.id = (k.response_body::json->>'id')::uuid
             where k.key = ${keyB}) as charges,
           (select count(*)::int from outbox o join idempotency_keys k on o.aggregate_id = (k.response_body::json->>'id')::uuid
             where k.key = ${keyB}) as events`;
  checks.check(cb?.charges === 1 && cb.events === 1, "(b) one charge and one outbox row for the key", JSON.stringify(cb));

  // (c)
  const keys = Array.from({ length: 50 }, () => crypto.randomUUID());
  const before = (await sql<{ n: number }[]>`select count(*)::int as n from charges`)[0]?.n ?? 0;
  await Promise.all(keys.flatMap((k, i) => Array.from({ length: 5 }, () => postCharge(api.base, k, 100 + i, tally))));
  const after = (await sql<{ n: number }[]>`select count(*)::int as n from charges`)[0]?.n ?? 0;
  checks.check(after - before === 50, "(c) 50 keys × 5 concurrent retries make exactly 50 charges", `${after - before} charges`);
  const fresh = tally.freshByKey();
  const wrongKeys = keys.filter((k) => (fresh.get(k) ?? 0) !== 1).length;
  checks.check(wrongKeys === 0, "(c) each key got exactly one fresh 201", `${wrongKeys} keys without exactly one`);

  const totals = await deliveryInvariants(ctx);
  checks.check(totals.charges === tally.freshByKey().size, "charges = distinct keys that got a fresh 201",
    `${totals.charges} charges, ${tally.freshByKey().size} keys`);
  checks.check(tally.count((a) => a.status >= 500 || a.status === 0) === 0, "no 5xx and no unanswered request");
  return totals;
});
