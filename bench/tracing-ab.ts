// What exporting traces costs the ledger: created/s of one checkout with
// OTEL_EXPORTER_OTLP_ENDPOINT set (every request a server span, batched to an OTLP/HTTP
// receiver on loopback) against the same checkout without it, alternated in one run.
// Without an endpoint nothing is built: that side is held against the code before tracing
// with bench/core-ab.ts.
//   bun bench/tracing-ab.ts [pairs=4, rounded up to even] [seconds=10]
import { answered, startApi, warmThenMeasure } from "./api-bench.ts";
import { freshDatabase, log, median } from "./support.ts";
import { tokenFor } from "../testkit/auth.ts";
import { startOtlpReceiver } from "../testkit/otlp.ts";
import { API_APP } from "../testkit/processes.ts";

const CONNECTIONS = 32;
const [pairs, seconds] = [2 * Math.ceil(Number(process.argv[2] ?? 4) / 2), Number(process.argv[3] ?? 10)];
const otlp = await startOtlpReceiver();

async function ledgerRun(traced: boolean): Promise<{ rate: number; cpuUsPerCharge: number }> {
  const db = await freshDatabase("tracing_ab", 4, false);
  const env: Record<string, string> = { PAYMENT_PROCESSOR: "none", ...(traced && { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint }) };
  const api = await startApi(db, "warn", env);
  try {
    const measured = await warmThenMeasure(db, api.port, CONNECTIONS, seconds, await tokenFor(), API_APP, [api.child.pid]);
    const cpuUsPerCharge = ((measured.cost.processS ?? 0) * 1e6) / Math.max(1, measured.chargesInRun);
    return { rate: answered(measured.run, 201) / (measured.run.durationUs / 1e6), cpuUsPerCharge };
  } finally {
    await api.child.stop();
    await db.drop();
  }
}

const ratios: number[] = [];
const cpu = { on: [] as number[], off: [] as number[] };
try {
  for (let i = 0; i < pairs; i++) {
    const order = i % 2 === 0 ? [true, false] : [false, true];
    const runs = new Map<boolean, { rate: number; cpuUsPerCharge: number }>();
    for (const traced of order) runs.set(traced, await ledgerRun(traced));
    const [on, off] = [runs.get(true)!, runs.get(false)!];
    ratios.push(on.rate / off.rate);
    cpu.on.push(on.cpuUsPerCharge);
    cpu.off.push(off.cpuUsPerCharge);
    log(`pair ${i + 1}: traced ${Math.round(on.rate)} vs untraced ${Math.round(off.rate)} created/s (${(on.rate / off.rate).toFixed(3)}); API CPU per charge ${on.cpuUsPerCharge.toFixed(0)} vs ${off.cpuUsPerCharge.toFixed(0)} µs`);
  }
  log(`median ratio, traced / untraced: ${median(ratios).toFixed(3)} (${ratios.map((r) => r.toFixed(3)).join(", ")}); API CPU per charge ${median(cpu.on).toFixed(0)} vs ${median(cpu.off).toFixed(0)} µs; ${otlp.spans().length} spans received`);
} finally {
  await otlp.stop();
}
process.exit(0);
