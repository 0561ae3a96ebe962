// `bun run bench [--quick] [--only <section>]`: each figure beside the limit measured in the same run on the same
// machine, limit/ours pairs alternated, the median of the per-pair ratios reported. Prints a
// table, writes bench/results/<date>.json. Exit 0 whatever the ratios; 1 only if a
// measurement crashed. See bench/README.md.
import { apiRun, conflictRun, describeApi, WARM_UP_SECONDS, type ApiRun } from "./api-bench.ts";
import { dbLimit, type DbLimit } from "./db-limit.ts";
import { bareRun, describeThroughput, scaledRun, type Throughput } from "./api-limits.ts";
import { e2eRun } from "./e2e-bench.ts";
import { compareSideBySide, type Comparison } from "./side-by-side.ts";
import { REFUNDS_PER_CHARGE } from "./mqtt-bench.ts";
import { alternate, clientSide, loadAverage, openBareClient, ratiosOf, relaySide, warmRelay } from "./drain-pairs.ts";
import { checkoutOf, ELYSIA_BASELINE, OPEN_COUNT_BASELINE, ORDER_BASELINE } from "./relay-baseline.ts";
import { relayCost, type RelayCost } from "./relay-cost.ts";
import { liveCpuSection } from "./relay-live.ts";
import { besideSection } from "./beside.ts";
import { growthSection, GROWTH_DEFAULTS } from "./outbox-growth.ts";
import { unitCostsSection } from "./unit-costs.ts";
import { processorSection } from "./processor-bench.ts";
import { subscriberSection } from "./subscriber-ab.ts";
import { benchServices, log, median } from "./support.ts";
import { createReport } from "./report.ts";
import { ServicesUnavailable } from "../testkit/services.ts";

const quick = process.argv.includes("--quick");
// `--only auth` runs the sections whose name contains "auth", and nothing else.
const onlyAt = process.argv.indexOf("--only");
const only = onlyAt >= 0 ? process.argv[onlyAt + 1] : undefined;
const P = quick
  ? { pairs: 1, seconds: 4, replaySeconds: 2, conflictSeconds: 2, brokerMessages: 10_000, drainRows: 10_000, drainRounds: 3, roundRows: 5_000, e2eSeconds: 5, logCompare: false, sideBySideRounds: 2 }
  : { pairs: 3, seconds: 10, replaySeconds: 5, conflictSeconds: 5, brokerMessages: 50_000, drainRows: 50_000, drainRounds: 9, roundRows: 10_000, e2eSeconds: 20, logCompare: true, sideBySideRounds: 5 };
const CONNECTIONS = 32;
const E2E_RATE = 200;

const report = createReport(only, { quick, params: P, connections: CONNECTIONS });
const { row, section, notes, raw } = report;

/** The median of per-run values, a run without one (null) counting as NaN. */
function per(values: (number | null)[]): number {
  return median(values.map((v) => v ?? Number.NaN));
}

/** The per-round ratios, and any failed answers, of a side-by-side comparison. */
const sideBySideNotes = (name: string, c: Comparison): void => void notes.push(`${name}: created/s per round ${c.rounds.map((r) => (r.aPerSec / r.bPerSec).toFixed(3)).join(", ")}`, ...(c.errors > 0 ? [`${name}: ${c.errors} non-2xx or socket errors`] : []));

await benchServices().catch((error: unknown) => {
  if (!(error instanceof ServicesUnavailable)) throw error;
  console.error(`bench: ${error.message}`);
  process.exit(1);
});

const started = Date.now();

// Triples (pgbench, bare stack, ours) in turn, so each ratio compares runs minutes apart.
await section("API vs bare stack and DB limit", async () => {
  const limits: DbLimit[] = [];
  const bares: Throughput[] = [];
  const ours: ApiRun[] = [];
  for (let i = 0; i < P.pairs; i++) {
    const limit = await dbLimit(CONNECTIONS, P.seconds);
    log(`pair ${i + 1}: pgbench ${Math.round(limit.tps)} tps`);
    limits.push(limit);
    const bare = await bareRun(CONNECTIONS, P.seconds);
    log(`pair ${i + 1}: ${describeThroughput(bare)}`);
    bares.push(bare);
    const api = await apiRun(CONNECTIONS, P.seconds, "info", P.replaySeconds);
    log(`pair ${i + 1}: ${describeApi(api)}`);
    ours.push(api);
  }
  raw.dbLimit = limits;
  raw.bare = bares;
  raw.api = ours;
  const ratios = ours.map((a, i) => a.createdPerSec / (limits[i]?.tps ?? Number.NaN));
  const bareRatios = ours.map((a, i) => a.createdPerSec / (bares[i]?.createdPerSec ?? Number.NaN));
  const replayRatios = ours.map((a) => (a.replaysPerSec ?? Number.NaN) / a.createdPerSec);
  const createdMedian = median(ours.map((a) => a.createdPerSec));
  row("API created/s vs bare Bun.serve + postgres.js", createdMedian, "/s", ">= 0.85", (r) => r >= 0.85, median(bares.map((b) => b.createdPerSec)), median(bareRatios));
  row("API created/s vs DB limit (pgbench tps)", createdMedian, "/s", "-", null, median(limits.map((l) => l.tps)), median(ratios));
  row("API CPU per charge, API process vs bare", per(ours.map((a) => a.apiUsPerCharge)), "µs", "-", null, per(bares.map((b) => b.serverUsPerCharge)), per(ours.map((a, i) => (a.apiUsPerCharge ?? Number.NaN) / (bares[i]?.serverUsPerCharge ?? Number.NaN))));
  row("API CPU per charge, Postgres vs bare's", per(ours.map((a) => a.postgresUsPerCharge)), "µs", "-", null, per(bares.map((b) => b.postgresUsPerCharge)), per(ours.map((a, i) => (a.postgresUsPerCharge ?? Number.NaN) / (bares[i]?.postgresUsPerCharge ?? Number.NaN))));
  row("bare stack p99 at 32 conns", median(bares.map((b) => b.p99Ms)), "ms", "-", null);
  row("API p50 at 32 conns", median(ours.map((a) => a.p50Ms)), "ms", "-", null);
  row("API p99 at 32 conns", median(ours.map((a) => a.p99Ms)), "ms", "<= 25 ms", (v) => v <= 25);
  row("API max at 32 conns", median(ours.map((a) => a.maxMs)), "ms", "-", null);
  row(`API p99 in a new process's first ${WARM_UP_SECONDS} s (start-up)`, median(ours.map((a) => a.startP99Ms)), "ms", "-", null);
  row(`bare stack p99 in its first ${WARM_UP_SECONDS} s`, median(bares.map((b) => b.startP99Ms)), "ms", "-", null);
  row("replays/s (one key) vs created/s", median(ours.map((a) => a.replaysPerSec ?? Number.NaN)), "/s", ">= 1.5", (r) => r >= 1.5, createdMedian, median(replayRatios));
  const errors = ours.reduce((n, a) => n + a.non2xx + a.socketErrors + (a.replayNon2xx ?? 0), 0);
  if (errors > 0) notes.push(`API: ${errors} non-2xx or socket errors during created/replay runs`);
  const bareErrors = bares.reduce((n, b) => n + b.errors, 0);
  if (bareErrors > 0) notes.push(`bare stack: ${bareErrors} non-201 or socket errors`);
});

// What group commit buys: the default (API_CHARGE_STATEMENTS=2, requests queued behind the
// running statements go several to one) against one statement per request (as many
// statements as connections), pairs alternated.
await section("group commit (API_CHARGE_STATEMENTS default vs one statement per request)", async () => {
  const batched: ApiRun[] = [];
  const single: ApiRun[] = [];
  for (let i = 0; i < P.pairs; i++) {
    const off = await apiRun(CONNECTIONS, P.seconds, "info", 0, "jwt", { API_CHARGE_STATEMENTS: String(CONNECTIONS) });
    const on = await apiRun(CONNECTIONS, P.seconds, "info", 0);
    log(`pair ${i + 1}: ${describeApi(on)} | one statement per request: ${describeApi(off)}`);
    batched.push(on);
    single.push(off);
  }
  raw.groupCommit = { batched, single };
  const ratios = batched.map((b, i) => b.createdPerSec / (single[i]?.createdPerSec ?? Number.NaN));
  row("API created/s, group commit vs one statement per request", median(batched.map((a) => a.createdPerSec)), "/s", "-", null, median(single.map((a) => a.createdPerSec)), median(ratios));
  row("API p99, one statement per request", median(single.map((a) => a.p99Ms)), "ms", "-", null);
  row("Postgres CPU per charge, group commit vs one statement per request", per(batched.map((a) => a.postgresUsPerCharge)), "µs", "-", null, per(single.map((a) => a.postgresUsPerCharge)), per(batched.map((a, i) => (a.postgresUsPerCharge ?? Number.NaN) / (single[i]?.postgresUsPerCharge ?? Number.NaN))));
  const errors = [...batched, ...single].reduce((n, a) => n + a.non2xx + a.socketErrors, 0);
  if (errors > 0) notes.push(`group commit: ${errors} non-2xx or socket errors`);
});

// N API processes on one port (API_REUSE_PORT), the 32 connections shared out between them.
await section("API scale-out (1 vs 2 processes)", async () => {
  const one: Throughput[] = [];
  const two: Throughput[] = [];
  for (let i = 0; i < P.pairs; i++) {
    one.push(await scaledRun(1, CONNECTIONS, P.seconds));
    two.push(await scaledRun(2, CONNECTIONS, P.seconds));
    log(`pair ${i + 1}: ${describeThroughput(one[i]!)} | ${describeThroughput(two[i]!)}`);
  }
  raw.apiScaleOut = { one, two };
  const ratios = two.map((t, i) => t.createdPerSec / (one[i]?.createdPerSec ?? Number.NaN));
  row("API created/s, 2 processes vs 1 (one port)", median(two.map((t) => t.createdPerSec)), "/s", "-", null, median(one.map((t) => t.createdPerSec)), median(ratios));
  row("API p99, 2 processes (one port)", median(two.map((t) => t.p99Ms)), "ms", "-", null);
  const errors = [...one, ...two].reduce((n, t) => n + t.errors, 0);
  if (errors > 0) notes.push(`API scale-out: ${errors} non-201 or socket errors`);
});

await section("409 while the winner is held", async () => {
  const c = await conflictRun(1, P.conflictSeconds);
  raw.conflict = c;
  log(`409: ${c.requests} requests (by status: ${JSON.stringify(c.statuses)}), p50 ${c.p50Ms} p99 ${c.p99Ms} max ${c.maxMs} ms, winner ${c.winnerStatus}`);
  row("409 latency while winner held, p99 (1 conn)", c.p99Ms, "ms", "<= 5 ms", (v) => v <= 5);
  if (c.non409 > 0) notes.push(`409 run: ${c.non409} answers were not 409`);
  if (c.winnerStatus !== 201) notes.push(`409 run: the held winner answered ${c.winnerStatus}, expected 201`);
});

if (P.logCompare) {
  await section("log level", async () => {
    const info = await apiRun(CONNECTIONS, P.seconds, "info", 0);
    const warn = await apiRun(CONNECTIONS, P.seconds, "warn", 0);
    log(`${describeApi(info)} | ${describeApi(warn)}`);
    raw.logCompare = { info, warn };
    row("API created/s LOG_LEVEL=info vs =warn (info only)", info.createdPerSec, "/s", "-", null, warn.createdPerSec, info.createdPerSec / warn.createdPerSec);
  });
}

await section("auth cost (AUTH_MODE=jwt vs none)", async () => {
  const jwt: ApiRun[] = [];
  const none: ApiRun[] = [];
  for (let i = 0; i < P.pairs; i++) {
    const open = await apiRun(CONNECTIONS, P.seconds, "info", 0, "none");
    const verified = await apiRun(CONNECTIONS, P.seconds, "info", 0, "jwt");
    log(`pair ${i + 1}: ${describeApi(verified)} | ${describeApi(open)}`);
    none.push(open);
    jwt.push(verified);
  }
  raw.authCost = { jwt, none };
  const ratios = jwt.map((j, i) => j.createdPerSec / (none[i]?.createdPerSec ?? Number.NaN));
  row("API created/s AUTH_MODE=jwt vs =none (HS256)", median(jwt.map((a) => a.createdPerSec)), "/s", "-", null, median(none.map((a) => a.createdPerSec)), median(ratios));
  const errors = [...jwt, ...none].reduce((n, a) => n + a.non2xx + a.socketErrors, 0);
  if (errors > 0) notes.push(`auth cost: ${errors} non-2xx or socket errors`);
});

// The histogram's cost on the hot path: an API with API_HTTP_METRICS on beside one with it
// off, both at once on one database (side-by-side.ts), so the machine's drift, which moves
// sequential runs of the same code more than the histogram costs, falls on both.
await section("HTTP metrics cost (histogram on vs off)", async () => {
  const c = await compareSideBySide(P.sideBySideRounds, CONNECTIONS, P.seconds, { label: "on", env: { API_HTTP_METRICS: "1" } }, { label: "off", env: { API_HTTP_METRICS: "0" } });
  raw.httpMetricsCost = c;
  row("API created/s HTTP histogram on vs off (side by side)", c.aPerSec, "/s", ">= 0.98", (v) => v >= 0.98, c.bPerSec, c.ratio);
  row("API CPU µs/charge HTTP histogram on vs off (side by side)", c.aUsPerCharge, "µs", "-", null, c.bUsPerCharge, c.cpuRatio);
  sideBySideNotes("HTTP metrics cost", c);
});

// What counting the pool's open connections costs (postgres.js's debug mode, a stack per
// statement): this API beside the API of the commit before the count, side by side.
await section("open connections cost (this API vs the one before the count)", async () => {
  const baseline = await checkoutOf(process.env.BENCH_API_BASELINE ?? OPEN_COUNT_BASELINE);
  try {
    const c = await compareSideBySide(P.sideBySideRounds, CONNECTIONS, P.seconds, { label: "counted", env: {} }, { label: "before", env: {}, cwd: baseline.dir });
    raw.openConnectionsCost = c;
    row("API created/s, open connections counted vs the API before (side by side)", c.aPerSec, "/s", "-", null, c.bPerSec, c.ratio);
    row("API CPU µs/charge, open connections counted vs the API before (side by side)", c.aUsPerCharge, "µs", "-", null, c.bUsPerCharge, c.cpuRatio);
    sideBySideNotes("open connections cost", c);
  } finally {
    await baseline.remove();
  }
});

// Elysia's cost: this API (Elysia) beside the API of the commit before it (the hand-written
// router and pipeline), side by side on one database, as the histogram's cost is measured.
await section("Elysia cost (this API vs the hand-written router before it)", async () => {
  const baseline = await checkoutOf(process.env.BENCH_ELYSIA_BASELINE ?? ELYSIA_BASELINE);
  try {
    const c = await compareSideBySide(P.sideBySideRounds, CONNECTIONS, P.seconds, { label: "elysia", env: {} }, { label: "router", env: {}, cwd: baseline.dir });
    raw.elysiaCost = c;
    row("API created/s, Elysia vs the router before (side by side)", c.aPerSec, "/s", ">= 0.93", (v) => v >= 0.93, c.bPerSec, c.ratio);
    row("API p99 ms, Elysia vs the router before (side by side)", c.aP99Us / 1000, "ms", "<= 1.1", (v) => v <= 1.1, c.bP99Us / 1000, c.p99Ratio);
    row("API CPU µs/charge, Elysia vs the router before (side by side)", c.aUsPerCharge, "µs", "-", null, c.bUsPerCharge, c.cpuRatio);
    sideBySideNotes("Elysia cost", c);
  } finally {
    await baseline.remove();
  }
});

// Tight alternation (drain-pairs.ts): every side up and warm for the whole section, short runs
// of the same row count in turn, the order rotated each round, the median of per-round ratios.
await section("relay drain vs broker limit", async () => {
  const relay = await warmRelay();
  const single = await warmRelay({ RELAY_MQTT_CONNECTIONS: "1" });
  const wide = await openBareClient();
  const legal = await openBareClient("receive-maximum");
  try {
    const sides = [relaySide("relay", relay), clientSide("bare", wide), relaySide("one connection", single), clientSide("legal", legal)];
    const r = await alternate(sides, P.drainRounds, P.roundRows, (i, x) =>
      log(`round ${i + 1} (load ${loadAverage()}): relay ${Math.round(x.relay ?? 0)} rows/s, on one MQTT connection ${Math.round(x["one connection"] ?? 0)} | bare mqtt.js ${Math.round(x.bare ?? 0)} PUBACKs/s (window ${wide.window}), ${Math.round(x.legal ?? 0)} (window ${legal.window})`),
    );
    raw.relayDrainRounds = r;
    const rate = (name: string): number => median(r.rates[name] ?? []);
    const pairs = (a: string, b: string): string => ratiosOf(r, a, b).each.map((x) => x.toFixed(2)).join(", ");
    const rows = `${P.roundRows} rows, ${P.drainRounds} rounds alternated`;
    row(`relay drain rows/s (${rows}) vs bare mqtt.js PUBACKs/s, ${wide.window} in flight`, rate("relay"), "/s", ">= 0.8", (v) => v >= 0.8, rate("bare"), ratiosOf(r, "relay", "bare").median);
    row(`relay drain vs the bare client at the broker's Receive Maximum (${legal.window} in flight)`, rate("relay"), "/s", ">= 0.9", (v) => v >= 0.9, rate("legal"), ratiosOf(r, "relay", "legal").median);
    row("relay drain, RELAY_MQTT_CONNECTIONS default (3) vs 1", rate("relay"), "/s", "-", null, rate("one connection"), ratiosOf(r, "relay", "one connection").median);
    notes.push(`relay drain per round: vs ${wide.window} in flight ${pairs("relay", "bare")}; vs ${legal.window} in flight ${pairs("relay", "legal")}; load average per round ${r.loadAverages.join(" | ")}`);
  } finally {
    await Promise.allSettled([relay.stop(), single.stop(), wide.close(), legal.close()]);
  }
});

await section("relay order cost", async () => {
  // The per-aggregate rule's cost: this relay beside the one before it (bench/relay-baseline.ts),
  // on a ChargeCreated-only backlog and on one of 20 refunds per charge, in tight alternation.
  const baseline = await checkoutOf(process.env.BENCH_RELAY_BASELINE ?? ORDER_BASELINE);
  try {
    const ours = await warmRelay();
    const before = await warmRelay({}, baseline.dir);
    try {
      const sides = [relaySide("ours", ours), relaySide("before", before), relaySide("chains", ours, "chains"), relaySide("chains before", before, "chains")];
      const r = await alternate(sides, P.drainRounds, P.roundRows, (i, x) =>
        log(`round ${i + 1} (load ${loadAverage()}): ChargeCreated backlog ${Math.round(x.ours ?? 0)} rows/s, before ${Math.round(x.before ?? 0)} | ${REFUNDS_PER_CHARGE} refunds per charge ${Math.round(x.chains ?? 0)} rows/s, before (no order) ${Math.round(x["chains before"] ?? 0)}`),
      );
      raw.relayOrderRounds = r;
      const rate = (name: string): number => median(r.rates[name] ?? []);
      const pairs = (a: string, b: string): string => ratiosOf(r, a, b).each.map((x) => x.toFixed(2)).join(", ");
      row(`relay drain, ChargeCreated backlog (${P.roundRows} rows, ${P.drainRounds} rounds): per-aggregate order vs the relay before it`, rate("ours"), "/s", "-", null, rate("before"), ratiosOf(r, "ours", "before").median);
      row(`relay drain, ${REFUNDS_PER_CHARGE} refunds per charge vs the ChargeCreated backlog`, rate("chains"), "/s", ">= 0.5", (v) => v >= 0.5, rate("ours"), ratiosOf(r, "chains", "ours").median);
      row(`relay drain, ${REFUNDS_PER_CHARGE} refunds per charge: in order vs the relay before it (no order)`, rate("chains"), "/s", "-", null, rate("chains before"), ratiosOf(r, "chains", "chains before").median);
      notes.push(`relay order per round: vs before ${pairs("ours", "before")}; chains vs ChargeCreated ${pairs("chains", "ours")}; load average per round ${r.loadAverages.join(" | ")}`);
    } finally {
      await Promise.allSettled([ours.stop(), before.stop()]);
    }
  } finally {
    await baseline.remove();
  }
});

await section("relay cost and scale-out", async () => {
  // CPU per row from /proc (relay process, its Postgres backends), 1 then 2 relays on one database.
  const one: RelayCost[] = [];
  const two: RelayCost[] = [];
  for (let i = 0; i < P.pairs; i++) {
    const single = await relayCost(P.drainRows, 1);
    const pair = await relayCost(P.drainRows, 2);
    log(`pair ${i + 1}: 1 relay ${Math.round(single.rowsPerSec)} rows/s, ${single.relayUsPerRow.toFixed(0)} + ${single.postgresUsPerRow.toFixed(0)} µs/row | 2 relays ${Math.round(pair.rowsPerSec)} rows/s, ${pair.relayUsPerRow.toFixed(0)} + ${pair.postgresUsPerRow.toFixed(0)} µs/row`);
    one.push(single);
    two.push(pair);
  }
  raw.relayCost = { one, two };
  row("relay CPU per row, relay process", median(one.map((c) => c.relayUsPerRow)), "µs", "-", null);
  row("relay CPU per row, its Postgres backends", median(one.map((c) => c.postgresUsPerRow)), "µs", "-", null);
  const ratios = two.map((c, i) => c.rowsPerSec / (one[i]?.rowsPerSec ?? Number.NaN));
  row("2 relays rows/s vs 1 relay (one database)", median(two.map((c) => c.rowsPerSec)), "/s", "-", null, median(one.map((c) => c.rowsPerSec)), median(ratios));
});

await section("relay beside the API", () => besideSection(report, quick ? 2 : 6, quick ? 3 : 10));
await section("relay CPU at live rates", () => liveCpuSection(report, P.pairs, quick ? 3 : 5));
await section("end to end", async () => {
  const e = await e2eRun(E2E_RATE, P.e2eSeconds);
  raw.e2e = e;
  log(`e2e: posted ${e.posted}, created ${e.created}, received ${e.received}`);
  row(`commit -> subscriber p50 (${E2E_RATE}/s)`, e.fromCreatedAt.p50, "ms", "<= 5 ms", (v) => v <= 5);
  row(`commit -> subscriber p99 (${E2E_RATE}/s)`, e.fromCreatedAt.p99, "ms", "<= 20 ms", (v) => v <= 20);
  row(`commit -> subscriber max (${E2E_RATE}/s)`, e.fromCreatedAt.max, "ms", "-", null);
  row("POST response -> subscriber p50 (info)", e.fromResponse.p50, "ms", "-", null);
  if (e.received < e.created) notes.push(`e2e: only ${e.received} of ${e.created} events received`);
});

// Both on a Postgres cluster of their own (bench/cluster.ts), for its WAL, CPU and autovacuum.
await section("outbox growth", () => growthSection(report, quick ? { rounds: 1, seconds: 10, rate: GROWTH_DEFAULTS.rate, seeded: 100_000 } : GROWTH_DEFAULTS));
await section("unit costs", () => unitCostsSection(report, quick ? 1 : 3, P.seconds));
await section("processor mode", () => processorSection(report, quick ? 1 : 2, P.seconds, quick ? 1 : 3));
await section("subscriber library", () => subscriberSection(report, quick ? 1 : 5, quick ? 500 : 3000));

process.exit(await report.finish(quick, started));
