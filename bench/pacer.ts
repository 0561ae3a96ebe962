// An open-loop load of POST /charges at a fixed rate, to several APIs at once: request i to
// each leaves at start + i/rate whatever the earlier ones are doing, and its latency is counted
// from that scheduled time (as wrk2 does), so a stall shows in the tail instead of slowing the
// load down. The APIs get their requests in turn within each tick, so none is always first.
import { latencyOf, type Latency } from "./support.ts";

export interface Paced {
  readonly sent: number;
  readonly created: number;
  /** Answers other than 201, and requests that failed. */
  readonly errors: number;
  /** From each request's scheduled time to its answer, ms. */
  readonly latency: Latency;
}

// The loop's tick: requests due within it leave together.
const TICK_MS = 1;

export async function openLoop(bases: readonly string[], ratePerTarget: number, seconds: number, token: string): Promise<Paced[]> {
  const total = Math.round(ratePerTarget * seconds);
  const results = bases.map(() => ({ created: 0, errors: 0, samples: [] as number[] }));
  const headers = (key: string) => ({ "Content-Type": "application/json", "Idempotency-Key": key, Authorization: `Bearer ${token}` });
  const post = async (target: number, scheduled: number): Promise<void> => {
    const r = results[target]!;
    try {
      const res = await fetch(`${bases[target]}/charges`, { method: "POST", headers: headers(crypto.randomUUID()), body: '{"amountCents":4900}' });
      await res.arrayBuffer();
      if (res.status === 201) r.created++;
      else r.errors++;
    } catch {
      r.errors++;
    }
    r.samples.push(performance.now() - scheduled);
  };
  const inFlight: Promise<void>[] = [];
  const start = performance.now();
  let sent = 0;
  while (sent < total) {
    const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * ratePerTarget) + 1);
    for (; sent < due; sent++) {
      const scheduled = start + (sent * 1000) / ratePerTarget;
      for (let k = 0; k < bases.length; k++) inFlight.push(post((sent + k) % bases.length, scheduled));
    }
    await Bun.sleep(TICK_MS);
  }
  await Promise.all(inFlight);
  return results.map((r) => ({ sent: total, created: r.created, errors: r.errors, latency: latencyOf(r.samples) }));
}
