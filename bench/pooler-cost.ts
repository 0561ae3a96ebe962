// What DATABASE_POOLER=transaction costs, in well under a minute: the API's charges/s (its
// idempotency core, in process: pool gate, group commit and the one statement, without HTTP)
// and the relay's drain, each
//   - as shipped on a direct connection (named prepared statements, bounds on the connection);
//   - with unnamed statements only (prepare: false), to isolate that cost (the API only);
//   - DATABASE_POOLER=transaction on the same direct connection (unnamed statements and the
//     bounds set per transaction: the API's statement in a transaction of its own);
//   - the same through a private PgBouncer in transaction mode, when pgbouncer is installed.
//   bun bench/pooler-cost.ts [seconds per API run=3] [relay rows=20000]
// Rounds alternate the variants; each figure is the median of its rounds. The load generator
// shares the process and the CPU with what it measures: the ratios mean more than the rates.
import { loadConfig, type Config } from "../lib/platform/config.ts";
import { createSql, type DbOptions } from "../lib/platform/db.ts";
import { boundedCore } from "../lib/api/services.ts";
import { createCharge } from "../lib/charges/charges.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay, laneCount } from "../lib/relay/loop.ts";
import { insertPending } from "../testkit/outbox.ts";
import { pgbouncerBinary, privatePgbouncer } from "../testkit/pgbouncer.ts";
import { benchServices, freshDatabase, median, untilDrained, log } from "./support.ts";

const seconds = Number(process.argv[2] ?? 3);
const relayRows = Number(process.argv[3] ?? 20_000);
// Enough rounds to take a median of, few enough to stay under a minute.
const ROUNDS = 2;
// The API's pool and the bench's concurrency (bench/README.md row 2: wrk -c32).
const CLIENTS = 32;
// A new pool compiles and opens its connections in its first second.
const WARM_UP_MS = 1000;
const DRAIN_TIMEOUT_MS = 120_000;

const { mqttUrl } = await benchServices();
const db = await freshDatabase("pooler_cost", 4);
const bouncer = pgbouncerBinary() ? await privatePgbouncer(db.url, { poolSize: CLIENTS }) : undefined;
if (!bouncer) log("pgbouncer is not installed: the PgBouncer rows are left out (apt-get install -y pgbouncer)");

interface Variant {
  readonly name: string;
  readonly url: string;
  readonly options: DbOptions;
}

const direct: Variant = { name: "direct, named statements (default)", url: db.url, options: {} };
const unnamed: Variant = { name: "direct, unnamed statements", url: db.url, options: { singleUse: true } };
const pooledDirect: Variant = { name: "DATABASE_POOLER=transaction, direct", url: db.url, options: { pooler: "transaction" } };
const viaBouncer: Variant[] = bouncer ? [{ name: "DATABASE_POOLER=transaction, via PgBouncer", url: bouncer.urlFor(db.url), options: { pooler: "transaction" } }] : [];

/** Charges created per second by CLIENTS loops on the core, after a warm-up. */
async function apiRate(config: Config, variant: Variant): Promise<number> {
  const bounds = config.apiTimeBounds;
  const sql = createSql(variant.url, { max: CLIENTS, ...variant.options, statementTimeoutMs: bounds.statementTimeoutMs, lockTimeoutMs: bounds.lockTimeoutMs });
  const core = boundedCore(config, sql, CLIENTS, () => {});
  let created = 0;
  let counting = false;
  const stopAt = performance.now() + WARM_UP_MS + seconds * 1000;
  const loop = async (): Promise<void> => {
    while (performance.now() < stopAt) {
      const outcome = await core.run(createCharge, { tenant: "bench", key: crypto.randomUUID(), input: { params: {}, body: { amountCents: 100 } }, traceparent: null });
      if (counting && outcome.kind === "created") created++;
    }
  };
  const loops = Array.from({ length: CLIENTS }, loop);
  await Bun.sleep(WARM_UP_MS);
  counting = true;
  const started = performance.now();
  await Promise.all(loops);
  const rate = created / ((performance.now() - started) / 1000);
  await sql.end({ timeout: 5 });
  return rate;
}

/** Rows per second of a drain of `relayRows` committed at once. */
async function drainRate(config: Config, variant: Variant): Promise<number> {
  await db.sql`truncate outbox`;
  await insertPending(db.sql, relayRows);
  const bounds = config.relayTimeBounds;
  const sql = createSql(variant.url, { max: laneCount(config.outboxBatchSize) + 1, ...variant.options, ...bounds });
  const broker = connectBroker(mqttUrl, { connections: config.relayMqttConnections });
  await new Promise<void>((resolve) => broker.onConnectionChange((up) => up && resolve()));
  const relay = createRelay({ sql, broker, batchSize: config.outboxBatchSize, pollMs: 1000, topicPrefix: `bench/${db.name}/` });
  const started = performance.now();
  void relay.run();
  await untilDrained(db.sql, DRAIN_TIMEOUT_MS);
  const rate = relayRows / ((performance.now() - started) / 1000);
  await relay.stop();
  await broker.close();
  await sql.end({ timeout: 5 });
  return rate;
}

async function measure(what: string, variants: readonly Variant[], rate: (config: Config, v: Variant) => Promise<number>): Promise<void> {
  const config = loadConfig({ DATABASE_URL: db.url });
  const rates = new Map<string, number[]>(variants.map((v) => [v.name, []]));
  for (let round = 0; round < ROUNDS; round++) {
    // Alternated, and reversed every other round, so neither end of a round is always the same variant.
    const order = round % 2 === 0 ? variants : [...variants].reverse();
    for (const v of order) {
      await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
      rates.get(v.name)!.push(await rate(config, v));
    }
  }
  const base = median(rates.get(variants[0]!.name)!);
  for (const v of variants) {
    const m = median(rates.get(v.name)!);
    console.log(`${what}, ${v.name}: ${Math.round(m)}/s (${(m / base).toFixed(2)}x)`);
  }
}

try {
  await measure("API created", [direct, unnamed, pooledDirect, ...viaBouncer], apiRate);
  await measure("relay drain rows", [direct, pooledDirect, ...viaBouncer], drainRate);
} finally {
  await bouncer?.stop();
  await db.drop();
}
