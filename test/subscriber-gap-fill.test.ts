// The reference subscriber fills a gap from the API's GET /charges/:id/events: a charge's
// refund is published into the subscriber's session at a private Mosquitto without
// persistence, which is restarted while the subscriber is away, so the event is gone from the
// broker for good (the relay had its PUBACK); the charge's next event then comes ahead of its
// turn. With the API the missing event is read, processed through the inbox in its turn, and
// the held one follows; a gap the API cannot fill (the row gone from the outbox, a token the
// API refuses) is skipped at the gap timeout as before. Real API, Postgres, broker and relay.
import { afterAll, afterEach, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { subscriptionFilter } from "../lib/charges/events.ts";
import { ConfigError, loadConfig } from "../lib/platform/config.ts";
import { createLogger } from "../lib/platform/log.ts";
import { createSql } from "../lib/platform/db.ts";
import { startTelemetry } from "../lib/platform/telemetry.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay, laneCount } from "../lib/relay/loop.ts";
import { startSubscriber, type Delivery, type GapFillApi, type Subscriber } from "../lib/subscriber/subscriber.ts";
import { startTestApi } from "../testkit/api.ts";
import { tokenFor, TEST_TENANT } from "../testkit/auth.ts";
import { mosquittoInstalled, privateMosquitto, type PrivateBroker } from "../testkit/mosquitto.ts";
import { collect, type Collector } from "../testkit/mqtt.ts";
import { valueOf } from "../testkit/prometheus.ts";
import { newCharge, postRefund, refundBody } from "../testkit/refunds.ts";
import { freshDatabase } from "../testkit/services.ts";
import { runToExit } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

const withMosquitto = test.skipIf(!mosquittoInstalled());
if (!mosquittoInstalled()) console.warn("test/subscriber-gap-fill.test.ts: the session-loss tests skipped: they need `mosquitto` on PATH");

// The gap is asked about after this: short, so the test is quick; the timeout is far beyond it.
const FILL_AFTER_MS = 200;
const LONG_GAP_TIMEOUT_MS = 30_000;
// For the gaps the API cannot fill: skipped at this timeout, after being asked.
const SHORT_GAP_TIMEOUT_MS = 2000;

const db = await freshDatabase("subscriber_gap_fill");
await db.sql`create table handled (n bigserial primary key, event_id uuid not null unique, aggregate_id text not null, sequence int)`;
const api = await startTestApi(db.url);
const cleanups: Array<() => Promise<unknown>> = [];
let broker: PrivateBroker;
beforeAll(async () => {
  if (!mosquittoInstalled()) return;
  broker = await privateMosquitto("persistence false");
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});
afterAll(async () => {
  await broker?.stop();
  await api.close();
  await db.drop();
});

interface Run {
  sub: Subscriber;
  readonly deliveries: Delivery[];
  readonly logs: Record<string, unknown>[];
  readonly errors: string[];
  readonly scrape: () => Promise<string>;
}

/** A ready subscriber on the private broker, consumer `consumer`, its handler writing `handled`. */
async function subscriber(run: Omit<Run, "sub"> & { sub?: Subscriber }, prefix: string, consumer: string, gapTimeoutMs: number, gapApi?: GapFillApi): Promise<Subscriber> {
  const telemetry = startTelemetry("subscriber-gap-fill-test", undefined, false);
  cleanups.push(() => telemetry.shutdown());
  const sub = startSubscriber({
    sql: db.sql,
    mqttUrl: broker.url,
    topic: subscriptionFilter(prefix),
    consumer,
    gapTimeoutMs,
    api: gapApi,
    meter: telemetry.provider.getMeter("charges"),
    log: createLogger("info", "subscriber", (line) => run.logs.push(JSON.parse(line) as Record<string, unknown>)),
    handler: async (event, tx) => {
      await tx`insert into handled (event_id, aggregate_id, sequence) values (${event.id}, ${event.aggregateId}, ${event.sequence ?? null})`;
    },
    onDelivery: (delivery) => run.deliveries.push(delivery),
    onError: (description) => run.errors.push(description),
  });
  cleanups.push(() => sub.close());
  (run as { scrape: () => Promise<string> }).scrape = async () => (await telemetry.scrape()).text();
  await sub.ready;
  return sub;
}

/** The API in this process, as the subscriber reaches it, with a token of `tenant` (or `token`). */
function gapApi(token: () => string | Promise<string> = () => tokenFor(TEST_TENANT)): GapFillApi {
  return { url: "http://localhost", token, fillAfterMs: FILL_AFTER_MS, fetch: (url, init) => api.fetch(new Request(url, init)) };
}

async function handled(aggregateId: string): Promise<number[]> {
  const rows = await db.sql<{ sequence: number }[]>`select sequence from handled where aggregate_id = ${aggregateId} order by n`;
  return rows.map((r) => r.sequence);
}

async function refund(chargeId: string, amountCents: number): Promise<void> {
  expect((await postRefund(api, chargeId, refundBody(amountCents), { key: crypto.randomUUID() })).status).toBe(201);
}

interface Lost {
  readonly chargeId: string;
  readonly prefix: string;
  readonly consumer: string;
  readonly collector: Collector;
  readonly run: Run;
}

/**
 * A charge whose event 2 was published into the subscriber's session while it was away, and
 * lost with the broker's restart (no persistence); `between` runs while the broker is down.
 * The subscriber is started again, and event 3 published: it comes ahead of its turn.
 */
async function loseEventTwo(gapTimeoutMs: number, gapFill: GapFillApi | undefined, between: (chargeId: string) => Promise<void> = async () => {}): Promise<Lost> {
  const prefix = `test/${crypto.randomUUID()}/`;
  const consumer = `test-gap-fill-${crypto.randomUUID().slice(0, 8)}`;
  const sql = createSql(db.url, { max: laneCount(50) + 1, applicationName: "relay-test" });
  cleanups.push(() => sql.end({ timeout: 5 }));
  const relayBroker = connectBroker(broker.url);
  cleanups.push(() => relayBroker.close());
  await waitUntil(() => relayBroker.connected, 5000, "the relay's broker connection");
  const relay = createRelay({ sql, broker: relayBroker, batchSize: 50, pollMs: 100, topicPrefix: prefix });
  cleanups.push(() => relay.stop());
  void relay.run();
  // Connected all along (a clean session): it sees event 2 before the broker loses it.
  const collector = await collect(broker.url, prefix);
  cleanups.push(() => collector.close());
  const run = { deliveries: [], logs: [], errors: [], scrape: async () => "" } as unknown as Run;
  const first = await subscriber(run, prefix, consumer, gapTimeoutMs, gapFill);
  const chargeId = await newCharge(api, 1000);
  await waitUntil(async () => (await handled(chargeId)).length === 1, 10_000, "event 1 processed");
  await first.close();
  await refund(chargeId, 100);
  await collector.waitForMessage((m) => m.envelope?.aggregateId === chargeId && m.envelope.sequence === 2);
  await waitUntil(async () => (await db.sql`select 1 from outbox where aggregate_id = ${chargeId} and published_at is null`).length === 0, 10_000, "event 2 marked published");
  await broker.stop();
  await between(chargeId);
  await broker.start();
  await waitUntil(() => relayBroker.connected, 10_000, "the relay back on the broker");
  run.sub = await subscriber(run, prefix, consumer, gapTimeoutMs, gapFill);
  await refund(chargeId, 200);
  return { chargeId, prefix, consumer, collector, run };
}

withMosquitto("a lost event is read from the API and processed in its turn, before the gap timeout; the held one follows; nothing is skipped", async () => {
  const { chargeId, consumer, collector, run } = await loseEventTwo(LONG_GAP_TIMEOUT_MS, gapApi());
  await waitUntil(async () => (await handled(chargeId)).length === 3, 15_000, "events 2 and 3 processed");
  // The gap's line comes once its answer is processed, after the handler's commits.
  await waitUntil(() => run.logs.some((l) => l.msg === "sequence gap filled from the API"), 5000, "the gap's log line");
  expect(await handled(chargeId)).toEqual([1, 2, 3]);
  const mine = run.deliveries.filter((d) => d.event.aggregateId === chargeId);
  const two = mine.find((d) => d.event.sequence === 2)!;
  expect(two).toMatchObject({ filled: true, duplicate: false, held: false, gapSkipped: false, redelivered: false });
  // The envelope the broker carried to the collector, as the subscriber's handler got it.
  const carried = collector.messages.find((m) => m.envelope?.aggregateId === chargeId && m.envelope.sequence === 2)!;
  expect(two.event).toEqual(carried.envelope!);
  expect(two.topic).toBe(carried.topic);
  expect(mine.find((d) => d.event.sequence === 3)).toMatchObject({ filled: false, held: true, gapSkipped: false });
  expect(run.sub.gapsFilled).toBe(1);
  expect(run.sub.gapsSkipped).toBe(0);
  expect(run.logs.filter((l) => l.msg === "sequence gap filled from the API")).toEqual([
    expect.objectContaining({ aggregateId: chargeId, lastSequence: 1, heldSequence: 3, filled: 1 }),
  ]);
  expect(valueOf(await run.scrape(), "subscriber_sequence_gaps_total", { consumer, outcome: "filled" })).toBe(1);
  // In the inbox once each, nothing held or dead.
  const [state] = await db.sql<{ inbox: number; held: number; dead: number }[]>`
    select (select count(*)::int from inbox i join outbox o on o.id = i.event_id where o.aggregate_id = ${chargeId}) as inbox,
           (select count(*)::int from subscriber_held_events where aggregate_id = ${chargeId}) as held,
           (select count(*)::int from subscriber_dead_letters d join outbox o on o.id = d.event_id where o.aggregate_id = ${chargeId}) as dead`;
  expect(state).toEqual({ inbox: 3, held: 0, dead: 0 });
});

withMosquitto("a gap the API cannot fill (the event gone from the outbox) is asked about, then skipped at the gap timeout", async () => {
  const { chargeId, run } = await loseEventTwo(SHORT_GAP_TIMEOUT_MS, gapApi(), async (id) => {
    await db.sql`delete from outbox where aggregate_id = ${id} and sequence = 2`;
  });
  await waitUntil(async () => (await handled(chargeId)).length === 2, 15_000, "event 3 processed past the gap");
  expect(await handled(chargeId)).toEqual([1, 3]);
  expect(run.sub.gapsFilled).toBe(0);
  expect(run.sub.gapsSkipped).toBe(1);
  const notFilled = run.logs.filter((l) => l.msg === "sequence gap not filled from the API");
  expect(notFilled.length).toBeGreaterThanOrEqual(1);
  expect(String(notFilled[0]!.reason)).toContain("no event 2");
});

withMosquitto("a token the API refuses: the gap is asked about again later, and skipped at the timeout; the token is never told", async () => {
  const { chargeId, run } = await loseEventTwo(SHORT_GAP_TIMEOUT_MS, gapApi(() => "not-a-token"));
  await waitUntil(async () => (await handled(chargeId)).length === 2, 15_000, "event 3 processed past the gap");
  expect(await handled(chargeId)).toEqual([1, 3]);
  expect(run.sub.gapsSkipped).toBe(1);
  expect(run.errors.some((e) => e.includes("answered 401"))).toBe(true);
  expect(run.errors.join("\n")).not.toContain("not-a-token");
});

withMosquitto("a call to the API in flight is cut by close(), not waited out: the close's abort, not the call's timeout, ends it", async () => {
  const calls: AbortSignal[] = [];
  // An API that never answers: only an abort ends the call.
  const hanging: GapFillApi = {
    ...gapApi(),
    fetch: (_url, init) =>
      new Promise<Response>((_, reject) => {
        const signal = init.signal!;
        calls.push(signal);
        signal.addEventListener("abort", () => reject(signal.reason));
      }),
  };
  const { run } = await loseEventTwo(LONG_GAP_TIMEOUT_MS, hanging);
  await waitUntil(() => calls.length > 0, 15_000, "the gap asked about");
  await run.sub.close();
  expect(calls[0]!.aborted).toBe(true);
  expect((calls[0]!.reason as Error).name).not.toBe("TimeoutError");
  // Closing is not a refusal: nothing told of a failed call.
  expect(run.errors.filter((e) => e.includes("not filled from the API"))).toEqual([]);
});

test("SUBSCRIBER_API_URL and SUBSCRIBER_API_TOKEN: both or neither, a fill wait below the gap timeout, the token never echoed", () => {
  const base = { DATABASE_URL: db.url };
  expect(loadConfig(base).subscriberApi).toBeUndefined();
  const config = loadConfig({ ...base, SUBSCRIBER_API_URL: "http://api.example/", SUBSCRIBER_API_TOKEN: "secret-token-value" });
  expect(config.subscriberApi?.url).toBe("http://api.example");
  expect(config.subscriberApi?.fillAfterMs).toBe(5000);
  expect(config.subscriberApi?.token.reveal()).toBe("secret-token-value");
  expect(JSON.stringify(config)).not.toContain("secret-token-value");
  const refused = (env: Record<string, string>): string => {
    try {
      loadConfig({ ...base, ...env });
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      return (error as Error).message;
    }
    throw new Error("accepted");
  };
  expect(refused({ SUBSCRIBER_API_URL: "http://api.example" })).toContain("SUBSCRIBER_API_TOKEN");
  expect(refused({ SUBSCRIBER_API_TOKEN: "secret-token-value" })).toContain("SUBSCRIBER_API_URL");
  expect(refused({ SUBSCRIBER_API_URL: "ftp://api.example", SUBSCRIBER_API_TOKEN: "secret-token-value" })).toContain("SUBSCRIBER_API_URL must use");
  const tooLate = refused({ SUBSCRIBER_API_URL: "http://a.example", SUBSCRIBER_API_TOKEN: "secret-token-value", SUBSCRIBER_GAP_TIMEOUT_MS: "1000", SUBSCRIBER_GAP_FILL_AFTER_MS: "1000" });
  expect(tooLate).toContain("SUBSCRIBER_GAP_FILL_AFTER_MS (1000) must be less than SUBSCRIBER_GAP_TIMEOUT_MS (1000)");
  const spaced = refused({ SUBSCRIBER_API_URL: "http://a.example", SUBSCRIBER_API_TOKEN: "secret token" });
  expect(spaced).toContain("SUBSCRIBER_API_TOKEN");
  expect(spaced).not.toContain("secret");
});

test("bun examples/reference-subscriber.ts with SUBSCRIBER_API_URL but no token: one line naming both, exit 1, nothing connected", async () => {
  const run = await runToExit(["bun", "examples/reference-subscriber.ts"], { DATABASE_URL: db.url, SUBSCRIBER_API_URL: "http://127.0.0.1:1", SUBSCRIBER_API_TOKEN: "" });
  expect(run.code).toBe(1);
  expect(run.stderr.trim()).toBe("configuration error: SUBSCRIBER_API_URL is set without SUBSCRIBER_API_TOKEN (a bearer token of the events' tenant); set both, or neither");
  expect(run.stdout).toBe("");
});
