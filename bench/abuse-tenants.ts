// One tenant at its rate limit does not slow another (issue 43 item 2): a real `bun api.ts`
// with API_RATE_LIMIT set, tenant B creating charges over 4 connections (wrk) alone, then the
// same beside tenant A flooding over 32 connections (mostly 429s), turns alternated. Reports
// B's created/s and p99 in each turn, and A's answers and p99.
//   bun bench/abuse-tenants.ts [rounds=2] [seconds=8] [rate=200]
import { answered, startApi, wrk, type WrkResult } from "./api-bench.ts";
import { freshDatabase, median } from "./support.ts";
import { tokenFor } from "../testkit/auth.ts";

const rounds = Number(process.argv[2] ?? 2);
const seconds = Number(process.argv[3] ?? 8);
const rate = Number(process.argv[4] ?? 200);
const B_CONNECTIONS = 4;
const A_CONNECTIONS = 32;

const perSec = (r: WrkResult, status: number) => answered(r, status) / (r.durationUs / 1e6);

async function main(): Promise<void> {
  const db = await freshDatabase("abuse_tenants");
  const api = await startApi(db, "warn", { API_RATE_LIMIT: String(rate) });
  const [a, b] = await Promise.all([tokenFor("tenant-flood"), tokenFor("tenant-quiet")]);
  const alone: WrkResult[] = [];
  const beside: { a: WrkResult; b: WrkResult }[] = [];
  try {
    await wrk(api.port, B_CONNECTIONS, 2, undefined, b); // warm-up
    for (let round = 0; round < rounds; round++) {
      // Alternate which turn goes first, so the machine's drift does not favour one.
      const turns = round % 2 === 0 ? ["alone", "beside"] : ["beside", "alone"];
      for (const turn of turns) {
        if (turn === "alone") alone.push(await wrk(api.port, B_CONNECTIONS, seconds, undefined, b));
        else {
          const [ra, rb] = await Promise.all([wrk(api.port, A_CONNECTIONS, seconds, undefined, a), wrk(api.port, B_CONNECTIONS, seconds, undefined, b)]);
          beside.push({ a: ra, b: rb });
        }
      }
    }
  } finally {
    await api.child.stop();
    await db.drop();
  }
  const ms = (us: number) => (us / 1000).toFixed(1);
  console.log(`API_RATE_LIMIT=${rate}; ${rounds} rounds of ${seconds} s; B over ${B_CONNECTIONS} connections, A over ${A_CONNECTIONS}`);
  console.log(`| turn | B created/s | B p50 ms | B p99 ms | A 201/s | A 429/s | A p99 ms |`);
  console.log(`| --- | ---: | ---: | ---: | ---: | ---: | ---: |`);
  for (const r of alone) console.log(`| B alone | ${perSec(r, 201).toFixed(0)} | ${ms(r.p50Us)} | ${ms(r.p99Us)} | - | - | - |`);
  for (const { a: ra, b: rb } of beside) {
    console.log(`| B beside A | ${perSec(rb, 201).toFixed(0)} | ${ms(rb.p50Us)} | ${ms(rb.p99Us)} | ${perSec(ra, 201).toFixed(0)} | ${perSec(ra, 429).toFixed(0)} | ${ms(ra.p99Us)} |`);
  }
  const p99Ratio = median(beside.map((x) => x.b.p99Us)) / median(alone.map((x) => x.p99Us));
  const rateRatio = median(beside.map((x) => perSec(x.b, 201))) / median(alone.map((r) => perSec(r, 201)));
  console.log(`\nB beside A / B alone: p99 ${p99Ratio.toFixed(2)}, created/s ${rateRatio.toFixed(2)}`);
}

await main();
