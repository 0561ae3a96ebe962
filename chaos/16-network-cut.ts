// Scenario 16: the network fails silently. A Postgres and a Mosquitto in containers of their own
// (testkit/partition.ts) serve the real api.ts and relay.ts at their addresses on a private
// Docker network, and the subscriber and the harness through their published ports. Under load,
// Postgres is cut off that network (`docker network disconnect`: packets to it are lost, no
// reset, no refusal) for longer than the API's request bound, then connected again; then the
// same between the relay and the broker, for longer than the relay's publish timeout and until
// its keepalive has noticed. Proves what no other harness here can make: a peer that vanishes
// without a word costs the client a 503 within the API's bounds, never a hang; /readyz of the
// API and the relay says so while it lasts; no key is left stuck, nothing is lost or doubled;
// the relay resumes by itself and publishes every row, each charge's events in order.
// Deterministic without sleeps: a cut lasts until counts and observations say it has done its
// work (refusals seen, each /readyz seen saying so, past the bound it must outlast), a phase
// ends after a count of charges; each answer is judged by when it was sent and answered
// relative to the cut. Needs Docker and the images (skipped, saying why, without them).
import { createScratchDatabase, scratchName } from "../testkit/database.ts";
import { collect } from "../testkit/mqtt.ts";
import { firstReceiptOrder } from "../testkit/order.ts";
import { partitionUnavailable, startPartition, type Side } from "../testkit/partition.ts";
import { waitUntil } from "../testkit/wait.ts";
import { startApi, startRelayService } from "./lib/harness.ts";
import { FailoverLoad } from "./lib/failover-load.ts";
import { ReadyProbes } from "./lib/ready-probes.ts";
import { deliveryInvariants, scenario, type Ctx } from "./lib/report.ts";
import { skipScenario } from "./lib/skip.ts";
import { startSubscriber } from "./lib/subscriber.ts";

// The API's request bound (API_REQUEST_TIMEOUT_MS's default) and the relay's publish timeout:
// a cut must outlast both, or it proves nothing about them.
const API_REQUEST_BOUND_MS = 10_000;
const RELAY_PUBLISH_TIMEOUT_MS = 10_000;
const CUT_AT_LEAST_MS = Math.max(API_REQUEST_BOUND_MS, RELAY_PUBLISH_TIMEOUT_MS) + 2000;
// What a loaded 2-core machine may add to a bound before an answer counts as a hang.
const SLACK_MS = 5000;
// /readyz bounds its database probe at 2 s (the API) and 1 s (the relay).
const READY_BOUND_MS = 2000;
// Phases: charges before the first cut, refusals during it, charges after each heal.
const CREATED_BEFORE = 20;
// One per client: each waits out the API's bound on its request once the cut has taken it.
const REFUSED_DURING = 4;
const CREATED_AFTER = 20;
// A cut whose observations never come ends here (the checks report what was missing); the relay's
// keepalive (15 s) notices a silent broker within 1.5 of it.
const CUT_AT_MOST_MS = 45_000;
const PHASE_TIMEOUT_MS = 45_000;

const why = await partitionUnavailable();
if (why !== undefined) skipScenario("16", why);

await scenario("16", "network cut silently: API and relay from Postgres, then relay from the broker", async (outer) => {
  const { checks, tally } = outer;
  const part = await startPartition();
  const db = await createScratchDatabase(part.adminDatabaseUrl, scratchName("chaos", "16"), { migrate: false, applicationName: "chaos-harness" });
  const privateDb = part.privateDatabaseUrl(db.url);
  const api = await startApi(privateDb, outer.prefix, undefined, { MQTT_URL: part.privateMqttUrl });
  outer.sub = await startSubscriber(db.url, outer.prefix, outer.consumer, part.mqttUrl);
  const relay = await startRelayService(privateDb, outer.prefix, part.privateMqttUrl);
  const collector = await collect(part.mqttUrl, outer.prefix);
  const ctx: Ctx = { ...outer, db, sql: db.sql };
  const load = new FailoverLoad(api.base, tally);
  const ready = new ReadyProbes({ api: api.base, relay: relay.base });

  const at: Record<`${Side}${"Cut" | "Heal"}` | "relayBack", number> = { postgresCut: 0, postgresHeal: 0, brokerCut: 0, brokerHeal: 0, relayBack: 0 };
  const lasted = (since: number): boolean => performance.now() - since >= CUT_AT_LEAST_MS;
  let running = true;
  const phases = async (): Promise<void> => {
    try {
      await waitUntil(() => load.created(0) >= CREATED_BEFORE, PHASE_TIMEOUT_MS, `${CREATED_BEFORE} charges before the cut`);
      await part.cut("postgres");
      at.postgresCut = performance.now();
      await waitUntil(() => lasted(at.postgresCut) && load.refusedAnswers(at.postgresCut) >= REFUSED_DURING
        && ready.saw("api", at.postgresCut, (r) => r.status === 503)
        && ready.saw("relay", at.postgresCut, (r) => r.body.database === "down"), CUT_AT_MOST_MS, "the Postgres cut observed")
        .catch(() => {}); // reported below
      await part.heal("postgres");
      at.postgresHeal = performance.now();
      await waitUntil(() => load.created(at.postgresHeal) >= CREATED_AFTER, PHASE_TIMEOUT_MS, "charges after the Postgres heal").catch(() => {});
      await part.cut("broker");
      at.brokerCut = performance.now();
      await waitUntil(() => lasted(at.brokerCut) && load.created(at.brokerCut) >= CREATED_AFTER
        && ready.saw("relay", at.brokerCut, (r) => r.body.broker === "disconnected"), CUT_AT_MOST_MS, "the broker cut observed")
        .catch(() => {});
      await part.heal("broker");
      at.brokerHeal = performance.now();
      await waitUntil(() => ready.saw("relay", at.brokerHeal, (r) => r.status === 200), PHASE_TIMEOUT_MS, "the relay ready again").catch(() => {});
      at.relayBack = performance.now();
      await waitUntil(() => load.created(at.relayBack) >= CREATED_AFTER, PHASE_TIMEOUT_MS, "charges after the broker heal").catch(() => {});
    } finally {
      load.stop();
      running = false;
    }
  };
  await Promise.all([phases(), load.run(), ready.run(() => running)]);

  checks.check(at.postgresHeal - at.postgresCut >= CUT_AT_LEAST_MS && at.brokerHeal - at.brokerCut >= CUT_AT_LEAST_MS,
    `each cut outlasted the bounds (${CUT_AT_LEAST_MS / 1000} s): Postgres ${secs(at.postgresHeal - at.postgresCut)} s, broker ${secs(at.brokerHeal - at.brokerCut)} s`);
  const bad = load.sent.filter((s) => s.status !== 201 && !((s.status === 503 || s.status === 409) && s.retryAfter !== null && s.contentType.startsWith("application/problem+json")));
  checks.check(bad.length === 0, `every request (${load.sent.length}) was answered: a 201, or a 503/409 problem with Retry-After`,
    `${bad.length} others: ${[...new Set(bad.map((s) => s.status === 0 ? "no answer" : `${s.status} ${s.contentType}`))].join(", ")}`);
  const slowest = Math.max(0, ...load.sent.map((s) => s.answeredAt - s.sentAt));
  checks.check(slowest <= API_REQUEST_BOUND_MS + SLACK_MS, `every answer came within the API's request bound (slowest ${secs(slowest)} s; bound ${API_REQUEST_BOUND_MS / 1000} s + ${SLACK_MS / 1000} s slack)`);
  const during = load.answeredBetween(at.postgresCut, at.postgresHeal);
  const refused = during.filter((s) => s.status === 503).length;
  checks.check(refused >= REFUSED_DURING, `while Postgres was cut off the API answered ${refused} 503s with Retry-After`, `${refused} of ${during.length}`);
  checks.check(ready.saw("api", at.postgresCut, (r) => r.status === 503, at.postgresHeal), "the API's /readyz said 503 while Postgres was cut off");
  checks.check(ready.saw("relay", at.postgresCut, (r) => r.status === 503 && r.body.database === "down", at.postgresHeal), "the relay's /readyz said database down while Postgres was cut off");
  checks.check(ready.saw("relay", at.brokerCut, (r) => r.status === 503 && r.body.broker === "disconnected", at.brokerHeal), "the relay's /readyz said broker disconnected while the broker was cut off");
  const slowReady = ready.slowest();
  checks.check(slowReady <= READY_BOUND_MS + SLACK_MS, `every /readyz answered within its bound (slowest ${secs(slowReady)} s)`, `${ready.unanswered()} unanswered`);
  checks.check(ready.saw("api", at.postgresHeal, (r) => r.status === 200) && at.relayBack - at.brokerHeal < PHASE_TIMEOUT_MS,
    `both /readyz said ready again after the heals (the relay ${secs(at.relayBack - at.brokerHeal)} s after the broker's)`);
  checks.check(load.created(at.postgresHeal) >= CREATED_AFTER, `the API served again by itself after the Postgres heal (${load.created(at.postgresHeal)} charges)`);

  const totals = await deliveryInvariants(ctx, PHASE_TIMEOUT_MS);
  const [keys] = await db.sql<{ stuck: number }[]>`select count(*)::int as stuck from idempotency_keys where status <> 'COMPLETED'`;
  checks.check(keys?.stuck === 0 && load.unsettledKeys() === 0, `no key left stuck: every key (${load.keys}) ended COMPLETED with a 201`,
    `${keys?.stuck} keys STARTED, ${load.unsettledKeys()} without a 201`);
  checks.check(totals.charges === load.keys, "one charge per key: none lost, none doubled", `${totals.charges} charges for ${load.keys} keys`);
  const [late] = await db.sql<{ n: number }[]>`select count(*)::int as n from outbox where created_at > now() - make_interval(secs => ${(performance.now() - at.brokerCut) / 1000})`;
  checks.check((late?.n ?? 0) > 0 && totals.unpublished === 0, `the relay resumed by itself and published the ${late?.n} rows written since the broker cut`);
  await waitUntil(() => collector.firstArrivals().size >= totals.outbox, PHASE_TIMEOUT_MS, "every event at the order collector").catch(() => {});
  // The order the relay promises (docs/events.md#order): each aggregate's events in sequence
  // order at first receipt. Between charges no order is promised while a backlog drains (claims
  // in several lanes at once): a first version judged commit order after the heal and saw
  // inversions, as documented.
  const sequences = firstReceiptOrder(collector.messages);
  checks.check(sequences.broken === 0 && sequences.events >= totals.outbox, `every event reached a collector of the broker, each charge's in sequence order (${sequences.events} events)`,
    `${sequences.events} of ${totals.outbox}; ${sequences.violations.join("; ")}`);
  checks.check(!api.child.exited && !relay.child.exited && !outer.sub.child.exited, "the API, the relay and the subscriber stayed up (none restarted)");
  await collector.close();
  await db.sql.end({ timeout: 2 });
  return totals;
});

function secs(ms: number): string {
  return (ms / 1000).toFixed(1);
}
