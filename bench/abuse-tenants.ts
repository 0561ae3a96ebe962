// One tenant at its rate limit does not slow another (issue 43 item 2): a real `bun api.ts`
// with API_RATE_LIMIT set; tenant B creates charges at a fixed rate below the limit (open loop,
// bench/pacer.ts: latency from each request's scheduled time) in four turns, alternated round
// by round:
//   alone      B by itself;
//   at limit   beside A sending exactly its limit (open loop): all of A admitted, the load a
//              tenant is allowed to put on the process;
//   over limit beside A sending OVER times its limit (open loop): A still gets its limit, the
//              rest is refused 429;
//   flood      beside A over 32 wrk connections that never wait (closed loop, Retry-After
//              ignored): refused as fast as the process can answer.
// The figure of the issue is "over limit" against "at limit": what A's refused requests cost B
// beyond what A's admitted ones do. Against "alone" it is also the cost of A's admitted load.
// The flood is a denial of service by request rate, which no per-tenant limit stops (each
// refusal still costs a parse and a token check): docs/security.md says what does.
//   [API_RATE_LIMIT_HOLD_MS=0] bun bench/abuse-tenants.ts [rounds=3] [seconds=8] [limit=200] [bRate=100] [over=5]
import { answered, startApi, wrk, type WrkResult } from "./api-bench.ts";
import { openLoop, type Paced } from "./pacer.ts";
import { freshDatabase, median } from "./support.ts";
import { tokenFor } from "../testkit/auth.ts";

const rounds = Number(process.argv[2] ?? 3);
const seconds = Number(process.argv[3] ?? 8);
const limit = Number(process.argv[4] ?? 200);
const bRate = Number(process.argv[5] ?? 100);
const over = Number(process.argv[6] ?? 5);
const A_CONNECTIONS = 32;

type Turn = "alone" | "at limit" | "over limit" | "flood";
const TURNS: readonly Turn[] = ["alone", "at limit", "over limit", "flood"];

interface Result {
  readonly b: Paced;
  /** A's answers per second: admitted, refused; and its p99 (ms). */
  readonly a?: { readonly created: number; readonly refused: number; readonly p99Ms: number };
}

const perSec = (r: WrkResult, status: number) => answered(r, status) / (r.durationUs / 1e6);

async function turn(kind: Turn, base: string, port: number, a: string, b: string): Promise<Result> {
  const bPaced = openLoop([base], bRate, seconds, b).then((r) => r[0]!);
  switch (kind) {
    case "alone":
      return { b: await bPaced };
    case "at limit":
    case "over limit": {
      const [ra, rb] = await Promise.all([openLoop([base], kind === "at limit" ? limit : limit * over, seconds, a).then((r) => r[0]!), bPaced]);
      return { b: rb, a: { created: ra.created / seconds, refused: ra.errors / seconds, p99Ms: ra.latency.p99 } };
    }
    case "flood": {
      const [ra, rb] = await Promise.all([wrk(port, A_CONNECTIONS, seconds, undefined, a), bPaced]);
      return { b: rb, a: { created: perSec(ra, 201), refused: perSec(ra, 429), p99Ms: ra.p99Us / 1000 } };
    }
  }
}

async function main(): Promise<void> {
  const db = await freshDatabase("abuse_tenants");
  // API_RATE_LIMIT_HOLD_MS=0 in the bench's environment: the refusals sent at once, to compare.
  const hold = process.env.API_RATE_LIMIT_HOLD_MS;
  const api = await startApi(db, "warn", { API_RATE_LIMIT: String(limit), ...(hold !== undefined && { API_RATE_LIMIT_HOLD_MS: hold }) });
  const base = `http://127.0.0.1:${api.port}`;
  const [a, b] = await Promise.all([tokenFor("tenant-flood"), tokenFor("tenant-quiet")]);
  const results = new Map<Turn, Result[]>(TURNS.map((t) => [t, []]));
  try {
    await openLoop([base], bRate, 2, b); // warm-up
    for (let round = 0; round < rounds; round++) {
      // Rotated, so the machine's drift favours no turn.
      for (let i = 0; i < TURNS.length; i++) {
        const kind = TURNS[(i + round) % TURNS.length]!;
        results.get(kind)!.push(await turn(kind, base, api.port, a, b));
      }
    }
  } finally {
    await api.child.stop();
    await db.drop();
  }
  report(results);
}

function report(results: Map<Turn, Result[]>): void {
  const ms = (v: number) => v.toFixed(1);
  console.log(`API_RATE_LIMIT=${limit}, API_RATE_LIMIT_HOLD_MS ${process.env.API_RATE_LIMIT_HOLD_MS ?? "default"}; B at ${bRate}/s (open loop); A at its limit, at ${over}x it (open loop), or over ${A_CONNECTIONS} wrk connections; ${rounds} rounds of ${seconds} s`);
  console.log(`| turn | B created/s | B errors | B p50 ms | B p99 ms | A 201/s | A 429/s | A p99 ms |`);
  console.log(`| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |`);
  for (const [kind, rs] of results) {
    for (const { b, a } of rs) {
      const tail = a ? `${a.created.toFixed(0)} | ${a.refused.toFixed(0)} | ${ms(a.p99Ms)}` : "- | - | -";
      console.log(`| ${kind} | ${(b.created / seconds).toFixed(0)} | ${b.errors} | ${ms(b.latency.p50)} | ${ms(b.latency.p99)} | ${tail} |`);
    }
  }
  const p99 = (kind: Turn) => median(results.get(kind)!.map((r) => r.b.latency.p99));
  console.log(`\nB's p99, median of the rounds: alone ${ms(p99("alone"))} ms, A at its limit ${ms(p99("at limit"))} ms, A at ${over}x ${ms(p99("over limit"))} ms, A flooding ${ms(p99("flood"))} ms`);
  console.log(`B's p99 with A over its limit / with A at it: ${(p99("over limit") / p99("at limit")).toFixed(2)}; / alone: ${(p99("over limit") / p99("alone")).toFixed(2)}; flooding / alone: ${(p99("flood") / p99("alone")).toFixed(2)}`);
}

await main();
