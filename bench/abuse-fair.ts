// One tenant cannot take the others' capacity: tenant B creates charges at a fixed rate (open
// loop: latency from each request's scheduled time) against a real `bun api.ts` at its defaults,
// alone and beside tenant A attacking it, turns rotated round by round:
//   slow bodies   A keeps ATTACK_SOCKETS connections, each a valid POST /charges announcing a
//                 40-byte body and sending `{` only, each replaced by a new one WAVE_MS after it
//                 opened, so about 125 new ones a second (Bun closes a stalled connection after
//                 about 10 s);
//   waits         processor mode: A's first POST hangs at the processor (the simulator's
//                 fault), its key in flight; ATTACK_SOCKETS connections send that key again with
//                 `Prefer: wait=30`, replaced as above; B's own turn "alone" is in
//                 processor mode too;
//   flood <path>  32 wrk connections on /metrics, /docs or /openapi.json (no token).
// Targets: B gets >= 99 % of its POSTs answered 201 with its p99 within 2x of alone (attacks),
// and its p50 within 2x of alone (floods).
//   bun bench/abuse-fair.ts [rounds=2] [seconds=16] [bRate=50]
import net from "node:net";
import { startEntrypoint, type Service } from "../testkit/processes.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { processorEnv } from "../testkit/processor.ts";
import { startProcessorSim, type ProcessorSim } from "../testkit/processor-sim.ts";
import { freshDatabase, latencyOf, log, median, type FreshDb, type Latency } from "./support.ts";
import type { Report } from "./report.ts";

const ATTACK_SOCKETS = 1001;
const WAVE_MS = 8000;
const FLOOD_CONNECTIONS = 32;
const FLOOD_PATHS = ["/metrics", "/docs", "/openapi.json"] as const;
const LEDGER_BODY = '{"amountCents":4900}';
const PROCESSOR_BODY = '{"amountCents":4900,"paymentMethod":"pm_card_visa"}';
// A's payment method: the simulator hangs its calls, so A's key stays in flight.
const HUNG_METHOD = "pm_card_mastercard";

type Turn = "alone" | "slow bodies" | `flood ${(typeof FLOOD_PATHS)[number]}` | "alone (processor)" | "waits";
const LEDGER_TURNS: readonly Turn[] = ["alone", "slow bodies", ...FLOOD_PATHS.map((p) => `flood ${p}` as const)];
const PROCESSOR_TURNS: readonly Turn[] = ["alone (processor)", "waits"];

export interface Paced {
  readonly sent: number;
  readonly created: number;
  readonly statuses: Record<string, number>;
  readonly latency: Latency;
}

export type FairResults = Record<Turn, Paced[]>;

/** B's POSTs at `rate` for `seconds`, open loop; latency from each one's scheduled time. */
async function paced(base: string, rate: number, seconds: number, token: string, body: string): Promise<Paced> {
  const total = Math.round(rate * seconds);
  const statuses: Record<string, number> = {};
  const samples: number[] = [];
  const headers = (key: string) => ({ "content-type": "application/json", "idempotency-key": key, authorization: `Bearer ${token}` });
  const post = async (scheduled: number): Promise<void> => {
    let status = "error";
    try {
      const res = await fetch(`${base}/charges`, { method: "POST", headers: headers(crypto.randomUUID()), body });
      await res.arrayBuffer();
      status = String(res.status);
    } catch {
      // Counted as not answered.
    }
    statuses[status] = (statuses[status] ?? 0) + 1;
    samples.push(performance.now() - scheduled);
  };
  const inFlight: Promise<void>[] = [];
  const start = performance.now();
  for (let sent = 0; sent < total; ) {
    const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * rate) + 1);
    for (; sent < due; sent++) inFlight.push(post(start + (sent * 1000) / rate));
    await Bun.sleep(1);
  }
  await Promise.all(inFlight);
  return { sent: total, created: statuses["201"] ?? 0, statuses, latency: latencyOf(samples) };
}

/**
 * ATTACK_SOCKETS connections writing `payload`, each replaced by a new one WAVE_MS after it
 * opened (about 125 a second, spread evenly), until `stop` resolves; how many it opened.
 */
async function waves(port: number, payload: string, stop: Promise<void>): Promise<number> {
  const ring: (net.Socket | undefined)[] = new Array(ATTACK_SOCKETS);
  const everyMs = WAVE_MS / ATTACK_SOCKETS;
  let stopped = false;
  void stop.then(() => (stopped = true));
  const start = performance.now();
  let opened = 0;
  while (!stopped) {
    const due = Math.floor((performance.now() - start) / everyMs) + 1;
    for (; opened < due; opened++) {
      const slot = opened % ATTACK_SOCKETS;
      ring[slot]?.destroy();
      const socket = net.connect(port, "127.0.0.1", () => socket.write(payload));
      socket.on("error", () => {});
      ring[slot] = socket;
    }
    await Promise.race([Bun.sleep(everyMs), stop]);
  }
  for (const s of ring) s?.destroy();
  return opened;
}

function postHead(token: string, key: string, extra: string[], length: number): string {
  return [`POST /charges HTTP/1.1`, "host: api", `authorization: Bearer ${token}`, "content-type: application/json", `idempotency-key: ${key}`, ...extra, `content-length: ${length}`, "", ""].join("\r\n");
}

async function startFairApi(db: FreshDb, env: Record<string, string>): Promise<Service> {
  return startEntrypoint("api", { env: { DATABASE_URL: db.url, LOG_LEVEL: "warn", ...authEnv(), ...env } });
}

async function ledgerTurn(turn: Turn, api: Service, seconds: number, rate: number, b: string, a: string): Promise<Paced> {
  const run = paced(api.base, rate, seconds, b, LEDGER_BODY);
  if (turn === "alone") return run;
  if (turn === "slow bodies") {
    const done = run.then(() => undefined);
    const [result] = await Promise.all([run, waves(api.port, `${postHead(a, crypto.randomUUID(), [], 40)}{`, done)]);
    return result;
  }
  const path = turn.slice("flood ".length);
  const [result] = await Promise.all([run, flood(api.port, path, seconds)]);
  return result;
}

/** wrk's GETs of `path` over FLOOD_CONNECTIONS connections for `seconds`; its requests a second. */
async function flood(port: number, path: string, seconds: number): Promise<number> {
  const proc = Bun.spawn(["wrk", "-t2", `-c${FLOOD_CONNECTIONS}`, `-d${seconds}s`, "--timeout", "5s", `http://127.0.0.1:${port}${path}`], { stdout: "pipe", stderr: "ignore" });
  const out = await new Response(proc.stdout).text();
  await proc.exited;
  const perSec = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? Number.NaN);
  log(`flood ${path}: ${Math.round(perSec)} requests/s`);
  return perSec;
}

async function waitsTurn(api: Service, sim: ProcessorSim, seconds: number, rate: number, b: string, a: string): Promise<Paced> {
  const key = crypto.randomUUID();
  const body = `{"amountCents":100,"paymentMethod":"${HUNG_METHOD}"}`;
  // The first POST of A's key hangs at the processor: the key is in flight for the whole turn.
  const first = fetch(`${api.base}/charges`, { method: "POST", headers: { "content-type": "application/json", "idempotency-key": key, authorization: `Bearer ${a}` }, body }).then((r) => r.arrayBuffer(), () => undefined);
  while (!sim.requests().some((r) => r.state === "hung")) await Bun.sleep(5);
  const run = paced(api.base, rate, seconds, b, PROCESSOR_BODY);
  const done = run.then(() => undefined);
  const [result] = await Promise.all([run, waves(api.port, `${postHead(a, key, ["prefer: wait=30"], Buffer.byteLength(body))}${body}`, done)]);
  void first;
  return result;
}

/** Every turn `rounds` times, rotated; the results by turn. */
export async function fairRun(rounds: number, seconds: number, rate: number): Promise<FairResults> {
  const results = Object.fromEntries([...LEDGER_TURNS, ...PROCESSOR_TURNS].map((t) => [t, [] as Paced[]])) as FairResults;
  const [a, b] = await Promise.all([tokenFor("tenant-attacker"), tokenFor("tenant-quiet")]);
  const ledgerDb = await freshDatabase("abuse_fair");
  const ledger = await startFairApi(ledgerDb, {});
  try {
    await paced(ledger.base, rate, 2, b, LEDGER_BODY);
    for (let round = 0; round < rounds; round++) {
      for (let i = 0; i < LEDGER_TURNS.length; i++) {
        const turn = LEDGER_TURNS[(i + round) % LEDGER_TURNS.length]!;
        const r = await ledgerTurn(turn, ledger, seconds, rate, b, a);
        log(`fair, round ${round + 1}, ${turn}: ${describe(r)}`);
        results[turn].push(r);
      }
    }
  } finally {
    await ledger.child.stop();
    await ledgerDb.drop();
  }
  const sim = await startProcessorSim();
  sim.setFaults({ rules: [{ kind: "hang", paymentMethod: HUNG_METHOD }] });
  const processorDb = await freshDatabase("abuse_fair_processor");
  // The hung call outlasts every turn; B's calls answer at once.
  const processor = await startFairApi(processorDb, { ...processorEnv(sim, 120_000), BUN_CONFIG_MAX_HTTP_REQUESTS: "1024" });
  try {
    await paced(processor.base, rate, 2, b, PROCESSOR_BODY);
    for (let round = 0; round < rounds; round++) {
      for (let i = 0; i < PROCESSOR_TURNS.length; i++) {
        const turn = PROCESSOR_TURNS[(i + round) % PROCESSOR_TURNS.length]!;
        const r = turn === "waits" ? await waitsTurn(processor, sim, seconds, rate, b, a) : await paced(processor.base, rate, seconds, b, PROCESSOR_BODY);
        log(`fair, round ${round + 1}, ${turn}: ${describe(r)}`);
        results[turn].push(r);
      }
    }
  } finally {
    await processor.child.stop();
    await sim.stop();
    await processorDb.drop();
  }
  return results;
}

function describe(r: Paced): string {
  return `B ${r.created}/${r.sent} created (${JSON.stringify(r.statuses)}), p50 ${r.latency.p50.toFixed(1)} p99 ${r.latency.p99.toFixed(1)} max ${r.latency.max.toFixed(1)} ms`;
}

const answeredShare = (rs: Paced[]) => median(rs.map((r) => r.created / r.sent));
const p99 = (rs: Paced[]) => median(rs.map((r) => r.latency.p99));
const p50 = (rs: Paced[]) => median(rs.map((r) => r.latency.p50));

/** The section of `bun run bench`. */
export async function fairSection(report: Report, rounds: number, seconds: number, rate = 50): Promise<void> {
  const results = await fairRun(rounds, seconds, rate);
  report.raw.fairAdmission = results;
  const attacks: readonly [Turn, Turn][] = [["slow bodies", "alone"], ["waits", "alone (processor)"]];
  for (const [attack, alone] of attacks) {
    report.row(`tenant B answered 201 beside A's ${attack} (${ATTACK_SOCKETS} connections, each reopened after ${WAVE_MS / 1000} s)`, answeredShare(results[attack]), "", ">= 0.99", (v) => v >= 0.99);
    report.row(`tenant B p99 beside A's ${attack} vs alone (${rate}/s)`, p99(results[attack]), "ms", "<= 2", (v) => v <= 2, p99(results[alone]), p99(results[attack]) / p99(results[alone]));
  }
  for (const path of FLOOD_PATHS) {
    const turn = `flood ${path}` as const;
    report.row(`tenant B p50 beside ${FLOOD_CONNECTIONS} connections on ${path} vs alone`, p50(results[turn]), "ms", "<= 2", (v) => v <= 2, p50(results.alone), p50(results[turn]) / p50(results.alone));
  }
}

if (import.meta.main) {
  const [rounds, seconds, rate] = [Number(process.argv[2] ?? 2), Number(process.argv[3] ?? 16), Number(process.argv[4] ?? 50)];
  const results = await fairRun(rounds, seconds, rate);
  console.log(`| turn | B answered 201 | B p50 ms | B p99 ms | B max ms |`);
  console.log(`| --- | ---: | ---: | ---: | ---: |`);
  for (const [turn, rs] of Object.entries(results)) {
    console.log(`| ${turn} | ${(answeredShare(rs) * 100).toFixed(1)} % | ${p50(rs).toFixed(1)} | ${p99(rs).toFixed(1)} | ${median(rs.map((r) => r.latency.max)).toFixed(1)} |`);
  }
}
