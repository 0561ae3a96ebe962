// Two real `bun relay.ts` processes on one database: a backlog and live commits while both
// drain. Every row is delivered, none twice (SKIP LOCKED keeps the relays off each other's
// claims), and published_at is set once per row (a trigger records every change of it).
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { createOutboxNotifier } from "../lib/platform/wakeup.ts";
import { collect } from "../testkit/mqtt.ts";
import { unboundedBroker } from "../testkit/mosquitto.ts";
import { countWhere, insertCharge, insertPending } from "../testkit/outbox.ts";
import { startEntrypoint, type Service } from "../testkit/processes.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(120_000);

const BACKLOG = 5000;
const LIVE = 300;

const db = await freshDatabase("scale_out_relays");
const { mqttUrl } = await services();
afterAll(() => db.drop());

test("two relay processes on one database: a backlog and live commits each delivered once, published_at set once", async () => {
  // Every change of published_at, with the backend that made it (each relay has its own).
  await db.sql`create table published_log (id uuid not null, backend int not null, at timestamptz not null)`;
  await db.sql`
    create function log_published() returns trigger language plpgsql as $$
    begin
      insert into published_log values (new.id, pg_backend_pid(), new.published_at);
      return new;
    end $$`;
  await db.sql`
    create trigger outbox_published after update of published_at on outbox
    for each row when (old.published_at is distinct from new.published_at) execute function log_published()`;

  const prefix = `test/${crypto.randomUUID()}/`;
  const broker = await unboundedBroker(mqttUrl);
  const collector = await collect(broker.url, prefix);
  const backlog = await insertPending(db.sql, BACKLOG);
  const env = { DATABASE_URL: db.url, MQTT_URL: broker.url, MQTT_TOPIC_PREFIX: prefix, LOG_LEVEL: "warn" };
  const relays: Service[] = await Promise.all([startEntrypoint("relay", { env }), startEntrypoint("relay", { env })]);
  const notifier = createOutboxNotifier(db.sql);
  try {
    // Live commits while both drain, each waking the relays as the API does.
    const live: string[] = [];
    for (let i = 0; i < LIVE; i++) {
      live.push((await insertCharge(db.sql)).id);
      notifier.poke();
    }
    await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 60_000, "every row published");
  } finally {
    await notifier.close();
    for (const relay of relays) expect(await relay.child.stop()).toBe(0);
  }
  // Whatever the relays handed the broker has arrived once this comes back.
  await collector.barrier();

  const all = (await db.sql<{ id: string }[]>`select id from outbox`).map((r) => r.id);
  expect(all).toHaveLength(BACKLOG + LIVE);
  expect(backlog.every((r) => all.includes(r.id))).toBe(true);
  const ids = collector.ids();
  expect(new Set(ids)).toEqual(new Set(all)); // none lost
  expect(ids).toHaveLength(all.length); // none twice
  const [log] = await db.sql<{ changes: number; rows: number; unpublished: number }[]>`
    select count(*)::int as changes, count(distinct id)::int as rows,
           (select count(*)::int from outbox where published_at is null) as unpublished
    from published_log`;
  expect(log).toEqual({ changes: all.length, rows: all.length, unpublished: 0 });
  expect(await countWhere(db.sql, "attempted")).toBe(0);
  await collector.close();
  await broker.stop();
});
