// One tenant at its rate limit does not slow another (issue 43 item 2): a real `bun api.ts`
// with API_RATE_LIMIT set; tenant B creates charges at a fixed rate below the limit (open loop,
// bench/pacer.ts: latency from each request's scheduled time), alone, then beside tenant A
// flooding over 32 wrk connections (mostly 429s), turns alternated. Reports B's created/s, p50
// and p99 in each turn, and A's answers and p99.
//   bun bench/abuse-tenants.ts [rounds=2] [seconds=8] [limit=200] [bRate=100]
import { answered, startApi, wrk, type WrkResult } from "./api-bench.ts";
import { openLoop, type Paced } from "./pacer.ts";
import { freshDatabase, median } from "./support.ts";
import { tokenFor } from "../testkit/auth.ts";

const rounds = Number(process.argv[2] ?? 2);
const seconds = Number(process.argv[3] ?? 8);
const limit = Number(process.argv[4] ?? 200);
const bRate = Number(process.argv[5] ?? 100);
const A_CONNECTIONS = 32;

const perSec = (r: WrkResult, status: number) => answered(r, status) / (r.durationUs / 1e6);

async function main(): Promise<void> {
  const db = await freshDatabase("abuse_tenants");
  const api = await startApi(db, "warn", { API_RATE_LIMIT: String(limit) });
  const base = `http://127.0.0.1:${api.port}`;
  const [a, b] = await Promise.all([tokenFor("tenant-flood"), tokenFor("tenant-quiet")]);
  const alone: Paced[] = [];
  const beside: { a: WrkResult; b: Paced }[] = [];
  try {
    await openLoop([base], bRate, 2, b); // warm-up
    for (let round = 0; round < rounds; round++) {
      // Alternate which turn goes first, so the machine's drift does not favour one.
      for (const turn of round % 2 === 0 ? ["alone", "beside"] : ["beside", "alone"]) {
        if (turn === "alone") alone.push((await openLoop([base], bRate, seconds, b))[0]!);
        else {
          const [ra, rb] = await Promise.all([wrk(api.port, A_CONNECTIONS, seconds, undefined, a), openLoop([base], bRate, seconds, b)]);
          beside.push({ a: ra, b: rb[0]! });
        }
      }
    }
  } finally {
    await api.child.stop();
    await db.drop();
  }
  const ms = (v: number) => v.toFixed(1);
  console.log(`API_RATE_LIMIT=${limit}; B at ${bRate}/s (open loop), A over ${A_CONNECTIONS} wrk connections; ${rounds} rounds of ${seconds} s`);
  console.log(`| turn | B created/s | B errors | B p50 ms | B p99 ms | A 201/s | A 429/s | A p99 ms |`);
  console.log(`| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |`);
  const row = (turn: string, r: Paced, tail: string) =>
    console.log(`| ${turn} | ${(r.created / seconds).toFixed(0)} | ${r.errors} | ${ms(r.latency.p50)} | ${ms(r.latency.p99)} | ${tail} |`);
  for (const r of alone) row("B alone", r, "- | - | -");
  for (const { a: ra, b: rb } of beside) row("B beside A", rb, `${perSec(ra, 201).toFixed(0)} | ${perSec(ra, 429).toFixed(0)} | ${ms(ra.p99Us / 1000)}`);
  const p99Ratio = median(beside.map((x) => x.b.latency.p99)) / median(alone.map((r) => r.latency.p99));
  console.log(`\nB's p99 beside A / alone: ${p99Ratio.toFixed(2)}`);
}

await main();
