// Scenario 6: soak. For CHAOS_SOAK_SECONDS (default 60): mixed traffic (new keys, retries of
// completed keys with the same body, retries with a changed body), while relays are SIGKILLed
// and restarted at random, sometimes two at once. Proves, over a long messy run: charges =
// distinct keys that got a fresh 201; each charge has one outbox row; every row reaches the
// subscriber at least once; the inbox holds each event once; nothing is lost.
import type { Child } from "../testkit/processes.ts";
import { sleep } from "../testkit/wait.ts";
import { hardKill, startApi, startRelay } from "./lib/harness.ts";
import { postCharge, postUntilFinal } from "./lib/client.ts";
import { deliveryInvariants, scenario } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";

const raw = process.env.CHAOS_SOAK_SECONDS?.trim();
const SECONDS = raw && /^\d+$/.test(raw) && Number(raw) > 0 ? Number(raw) : 60;
const WORKERS = 4;
const PAUSE_MS = 60;

await scenario("6", `soak for ${SECONDS} s: mixed traffic, retries, changed bodies, relay kills`, async (ctx) => {
  const { checks, tally } = ctx;
  const api = await startApi(ctx.db.url, ctx.prefix);
  ctx.sub = await startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer);
  let relays: Child[] = [await startRelay(ctx.db.url, ctx.prefix)];

  const stopAt = Date.now() + SECONDS * 1000;
  const done = new Map<string, { amount: number; body: string }>(); // keys with a final 201
  let sameRetries = 0;
  let badReplays = 0;
  let changedRetries = 0;
  let not422 = 0;
  const pick = (): [string, { amount: number; body: string }] | undefined => {
    const keys = [...done.keys()];
    const key = keys[Math.floor(Math.random() * keys.length)];
    const v = key === undefined ? undefined : done.get(key);
    return key !== undefined && v ? [key, v] : undefined;
  };
  const worker = async (): Promise<void> => {
    while (Date.now() < stopAt) {
      const r = Math.random();
      const old = done.size > 0 ? pick() : undefined;
      if (r < 0.6 || !old) {
        const key = crypto.randomUUID();
        const amount = 1 + Math.floor(Math.random() * 100_000);
        const a = await postUntilFinal(() => api.base, key, amount, tally, Date.now() + 10_000);
        if (a.status === 201) done.set(key, { amount, body: a.body });
      } else if (r < 0.85) {
        sameRetries += 1;
        const a = await postCharge(api.base, old[0], old[1].amount, tally);
        if (!(a.status === 201 && a.replayed && a.body === old[1].body)) badReplays += 1;
      } else {
        changedRetries += 1;
        const a = await postCharge(api.base, old[0], old[1].amount + 1, tally);
        if (a.status !== 422) not422 += 1;
      }
      await sleep(PAUSE_MS);
    }
  };
  let kills = 0;
  const chaos = async (): Promise<void> => {
    while (Date.now() < stopAt - 3000) {
      await sleep(1000 + Math.random() * 2500);
      const victim = relays[Math.floor(Math.random() * relays.length)];
      if (!victim) continue;
      await hardKill(victim);
      kills += 1;
      relays = relays.filter((r) => r !== victim);
      await sleep(Math.random() * 500);
      const wanted = Math.random() < 0.3 ? 2 : 1; // sometimes two relays share the outbox
      while (relays.length < wanted) relays.push(await startRelay(ctx.db.url, ctx.prefix));
    }
  };
  await Promise.all([chaos(), ...Array.from({ length: WORKERS }, () => worker())]);
  if (relays.length === 0) relays.push(await startRelay(ctx.db.url, ctx.prefix));

  checks.check(kills > 0, `relays SIGKILLed and restarted ${kills} times`);
  checks.check(!api.child.exited, "the API process stayed up", `exit code ${api.child.exitCode}`);
  checks.check(badReplays === 0, `same-body retries (${sameRetries}) were byte-identical replays`, `${badReplays} were not`);
  checks.check(not422 === 0 && changedRetries > 0, `changed-body retries (${changedRetries}) were 422`, `${not422} were not`);
  const s5 = tally.count((a) => a.status >= 500 || a.status === 0);
  checks.check(s5 === 0, "no 5xx and no unanswered request", `${s5}`);
  const fresh = tally.freshByKey();
  const twice = [...fresh.values()].filter((n) => n > 1).length;
  checks.check(twice === 0, "no key got two fresh 201s", `${twice} keys`);
  const totals = await deliveryInvariants(ctx, 30_000);
  checks.check(totals.charges === fresh.size, "charges = distinct keys that got a fresh 201", `${totals.charges} charges, ${fresh.size} keys`);
  checks.check(totals.outbox === totals.charges, "outbox rows = charges", `${totals.outbox} rows`);
  return totals;
});
