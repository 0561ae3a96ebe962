// What waking the relay costs the API: charge commits/s from 16 connections, each commit one
// statement writing the charge and its outbox row, in three modes:
//   none          no wake-up at all (the relay would find rows by polling)
//   notify-in-tx  pg_notify inside every charge's transaction (the obvious design)
//   poke          lib/platform/wakeup.ts: after the commit, at most one NOTIFY per window (NOTIFY_WINDOW_MS)
// Modes alternate so drift hits all of them.  bun bench/wakeup-cost.ts [seconds per run=5]
import type { Sql } from "../lib/platform/db.ts";
import { CHARGE_CREATED, chargeCreatedPayload } from "../lib/charges/events.ts";
import { createOutboxNotifier, OUTBOX_CHANNEL } from "../lib/platform/wakeup.ts";
import { waitUntil } from "../testkit/wait.ts";
import { freshDatabase } from "./support.ts";

const seconds = Number(process.argv[2] ?? 5);
const CONNECTIONS = 16;
type Mode = "none" | "notify-in-tx" | "poke";

const db = await freshDatabase("wakeup", CONNECTIONS + 1);
const { sql } = db;
let notifies = 0;
// A marker this script sends after a run: notifications arrive in commit order, so once it
// is here every notify of the run has been counted.
const markers = new Set<string>();
const listener = await sql.listen(OUTBOX_CHANNEL, (payload) => (payload ? markers.add(payload) : (notifies += 1)));

async function allNotifiesCounted(): Promise<void> {
  const marker = crypto.randomUUID();
  await sql`select pg_notify(${OUTBOX_CHANNEL}, ${marker})`;
  await waitUntil(() => markers.has(marker), 5000, "the marker notify");
}

function charge(db: Sql, notify: boolean): Promise<unknown> {
  const chargeId = crypto.randomUUID();
  const payload = chargeCreatedPayload({ chargeId, amountCents: 4900 });
  return notify
    ? db`with c as (insert into charges (id, amount_cents) values (${chargeId}, 4900) returning id)
         insert into outbox (id, aggregate_id, event_type, payload)
         select ${crypto.randomUUID()}, id, ${CHARGE_CREATED}, ${payload} from c
         returning pg_notify(${OUTBOX_CHANNEL}, '')`
    : db`with c as (insert into charges (id, amount_cents) values (${chargeId}, 4900) returning id)
         insert into outbox (id, aggregate_id, event_type, payload)
         select ${crypto.randomUUID()}, id, ${CHARGE_CREATED}, ${payload} from c`;
}

async function run(mode: Mode): Promise<{ rate: number; notifies: number }> {
  const notifier = createOutboxNotifier(sql);
  notifies = 0;
  let commits = 0;
  const until = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      while (performance.now() < until) {
        await charge(sql, mode === "notify-in-tx");
        commits += 1;
        if (mode === "poke") notifier.poke();
      }
    }),
  );
  await notifier.close();
  await allNotifiesCounted();
  return { rate: commits / seconds, notifies: notifies / seconds };
}

const results: Record<Mode, number[]> = { none: [], "notify-in-tx": [], poke: [] };
for (let round = 0; round < 2; round++) {
  for (const mode of ["none", "notify-in-tx", "poke"] as const) {
    const { rate, notifies: perSecond } = await run(mode);
    results[mode].push(rate);
    console.log(`${mode.padEnd(13)} ${Math.round(rate)} commits/s, ${Math.round(perSecond)} notifies/s`);
  }
}
const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
console.log(
  `mean: none ${Math.round(mean(results.none))}, notify-in-tx ${Math.round(mean(results["notify-in-tx"]))} ` +
    `(${(mean(results["notify-in-tx"]) / mean(results.none)).toFixed(2)}x), poke ${Math.round(mean(results.poke))} ` +
    `(${(mean(results.poke) / mean(results.none)).toFixed(2)}x)`,
);

await listener.unlisten();
await db.drop();
