// The reference subscriber as a process, configured by the service's SUBSCRIBER_* variables:
// the tests' and chaos harness's subscriber, printing one JSON line per event on stdout. A
// consumer of your own starts from examples/subscriber.ts, on charges-outbox/subscriber. Lines:
//   {"event":"ready","consumer":"...","topic":"...","broker":"mqtt://..."}
//   {"event":"broker-moved","from":"mqtt://...","to":"mqtt://..."}   (MQTT_URL a list: the broker in use was lost)
//   {"event":"received","id":"...","type":"...","aggregateId":"...","sequence":1,"topic":"...","duplicate":false,"redelivered":false,"held":false,"gapSkipped":false,"filled":false,"processed":1,"duplicates":0}
//   {"event":"held","id":"...","aggregateId":"...","sequence":3,"expected":2,"topic":"..."}
//   {"event":"rejected","topic":"...","reason":"..."}
//   {"event":"dead-lettered","id":"...","topic":"...","error":"...","attempts":5}
//   {"event":"stopped","processed":N,"duplicates":N,"rejected":N}
// Problems go to stderr. Environment: DATABASE_URL, DATABASE_POOLER, DATABASE_DIRECT_URL,
// MQTT_URL, MQTT_TOPIC_PREFIX as for the relay; SUBSCRIBER_CONSUMER (inbox consumer name and
// MQTT client id, default "example-subscriber"); SUBSCRIBER_CLIENT_ID to use another client id;
// SUBSCRIBER_INBOX_RETENTION_SECONDS (inbox rows older than this are deleted, default 7 days);
// SUBSCRIBER_GAP_TIMEOUT_MS (how long an event that came ahead of its turn waits for its
// predecessor before it is processed anyway, default 5 minutes); SUBSCRIBER_API_URL and
// SUBSCRIBER_API_TOKEN (the API and a bearer token of the events' tenant) to fill a gap from
// GET /charges/:id/events once it lasted SUBSCRIBER_GAP_FILL_AFTER_MS (default 5 s), before the
// timeout: such an event's received line says "filled":true;
// SUBSCRIBER_SHARE_GROUP to join an MQTT 5 shared subscription ($share/<group>/...): the
// processes of one group split the stream, each needing its own stable SUBSCRIBER_CLIENT_ID,
// and share the inbox through one SUBSCRIBER_CONSUMER;
// OTEL_EXPORTER_OTLP_ENDPOINT to push the subscriber_* metrics and the process and pool
// metrics (lib/platform/runtime-metrics.ts) over OTLP. The gap lines (held, skipped, late) are
// JSON log lines on stderr.
import { configOrExit } from "../lib/platform/config.ts";
import { createLogger } from "../lib/platform/log.ts";
import { maskUrl } from "../lib/platform/redact.ts";
import { exitOnStartupError, openDatabase, stopOnUnhandledRejection } from "../lib/platform/startup.ts";
import { createSql } from "../lib/platform/db.ts";
import { databaseModeLine } from "../lib/platform/pooler.ts";
import { onShutdownSignal } from "../lib/platform/runtime.ts";
import { startSubscriber } from "../lib/subscriber/subscriber.ts";
import { startInboxRetention } from "../lib/subscriber/inbox-retention.ts";
import { startTelemetry } from "../lib/platform/telemetry.ts";
import { observePool, startRuntimeMetrics } from "../lib/platform/runtime-metrics.ts";
import { transactionsInProgress } from "../lib/platform/tx.ts";
import { openConnections } from "../lib/platform/db.ts";
import { isShareGroup, sharedSubscriptionFilter, subscriptionFilter } from "../lib/charges/events.ts";

const config = configOrExit(process.env);
const consumer = process.env.SUBSCRIBER_CONSUMER?.trim() || "example-subscriber";
const shareGroup = process.env.SUBSCRIBER_SHARE_GROUP?.trim() || undefined;
const clientId = process.env.SUBSCRIBER_CLIENT_ID?.trim() || undefined;
if (shareGroup !== undefined && !isShareGroup(shareGroup)) {
  console.error("subscriber: SUBSCRIBER_SHARE_GROUP must be one topic level without '/', '+' or '#'");
  process.exit(1);
}
// The broker keeps events it gave a member in that member's session while it is away: a
// member must come back under the same client id, and two members must never share one.
if (shareGroup !== undefined && clientId === undefined) {
  console.error("subscriber: SUBSCRIBER_SHARE_GROUP needs SUBSCRIBER_CLIENT_ID, one stable id per member of the group");
  process.exit(1);
}
const topic = shareGroup === undefined ? subscriptionFilter(config.mqttTopicPrefix) : sharedSubscriptionFilter(shareGroup, config.mqttTopicPrefix);
const print = (line: Record<string, unknown>): void => console.log(JSON.stringify(line));
const log = createLogger(config.logLevel, "subscriber", console.error);
stopOnUnhandledRejection(log);
// Registered before startSubscriber creates its counter, so the counter is the SDK's.
const telemetry = startTelemetry("charges-subscriber", config.otlpEndpoint);
const meter = telemetry.provider.getMeter("charges");
const runtime = startRuntimeMetrics(meter);

// The pool's size, also reported as db_client_connections_max.
const POOL_SIZE = 2;
const poolName = `charges-subscriber-${consumer}`;
// The inbox table comes with the schema.
const sql = await openDatabase(config.databaseUrl, { max: POOL_SIZE, applicationName: poolName, pooler: config.databasePooler, countOpen: true }).catch(exitOnStartupError("subscriber"));
// Busy: the events' (and the sweep's and retention's) transactions in progress.
observePool(meter, { name: poolName, max: POOL_SIZE, busy: () => Math.min(POOL_SIZE, transactionsInProgress(sql)), open: () => openConnections(sql) ?? 0 });
// The retention job's lock: a session lock past the pooler when DATABASE_DIRECT_URL is given,
// else one per batch transaction (lib/platform/job-lock.ts).
const lockSql = config.databaseDirectUrl === undefined ? sql : createSql(config.databaseDirectUrl, { max: 1, applicationName: `${poolName}-direct` });
const database = databaseModeLine(config, { locks: "the inbox retention's lock" });
log.info(database.msg, database.fields);
const subscriberApi = config.subscriberApi;
if (subscriberApi) log.info("gaps are filled from the API", { api: maskUrl(subscriberApi.url), fillAfterMs: subscriberApi.fillAfterMs, gapTimeoutMs: config.subscriberGapTimeoutMs });

const subscriber = startSubscriber({
  sql,
  mqttUrl: config.mqttUrls,
  mqttProtocol: config.mqttProtocol,
  topic,
  consumer,
  clientId,
  log,
  gapTimeoutMs: config.subscriberGapTimeoutMs,
  api: subscriberApi && { url: subscriberApi.url, token: () => subscriberApi.token.reveal(), fillAfterMs: subscriberApi.fillAfterMs },
  onDelivery: ({ event, topic, duplicate, redelivered, held, gapSkipped, filled }) =>
    print({
      event: "received",
      id: event.id,
      type: event.type,
      aggregateId: event.aggregateId,
      tenantId: event.tenantId,
      sequence: event.sequence,
      topic,
      duplicate,
      redelivered,
      held,
      gapSkipped,
      filled,
      processed: subscriber.processed,
      duplicates: subscriber.duplicates,
    }),
  onHeld: ({ event, topic, expected }) =>
    print({ event: "held", id: event.id, aggregateId: event.aggregateId, sequence: event.sequence, expected, topic }),
  onRejected: (topic, reason) => print({ event: "rejected", topic, reason }),
  onDeadLetter: (letter) =>
    print({ event: "dead-lettered", id: letter.eventId, topic: letter.topic, error: letter.error, attempts: letter.attempts }),
  onError: (description) => console.error(`subscriber: ${description}`),
  onBrokerMove: (move) => print({ event: "broker-moved", ...move }),
});
// The broker in use, masked: the first of MQTT_URL that answered.
void subscriber.ready.then(() => print({ event: "ready", consumer, topic, broker: subscriber.broker }));
const retention = startInboxRetention(lockSql, config.subscriberInboxRetentionSeconds, log);

onShutdownSignal(() => {
  void (async () => {
    await subscriber.close();
    await retention.stop();
    await sql.end({ timeout: 5 });
    if (lockSql !== sql) await lockSql.end({ timeout: 5 });
    runtime.stop();
    await telemetry.shutdown();
    print({ event: "stopped", processed: subscriber.processed, duplicates: subscriber.duplicates, rejected: subscriber.rejected });
    process.exit(0);
  })();
});
