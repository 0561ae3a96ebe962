// (5) End-to-end latency: charges posted at a steady rate while the real relay runs; a bare
// mqtt.js subscriber on the same machine takes commit → receipt as receipt time minus the
// event's createdAt (the outbox row's now(), i.e. its transaction start: at or before the
// commit, so the figure errs on the slow side). Receipt minus the POST's response time is
// kept too (after the commit, so it errs on the fast side).
import type { EventData, EventEnvelope } from "../lib/charges/events.ts";
import { collect } from "../testkit/mqtt.ts";
import { waitUntil } from "../testkit/wait.ts";
import { startApi } from "./api-bench.ts";
import { tokenFor } from "../testkit/auth.ts";
import { benchServices, freshDatabase, latencyOf, startProcess, type Latency } from "./support.ts";

// Events still on their way when the last POST has been answered arrive within this.
const DRAIN_TIMEOUT_MS = 10_000;
// Posted at the same rate before the measured ones, and not counted: the figure is a service's
// in operation, as the drain's is (mqtt-bench.ts WARMUP). New API and relay processes spend
// their first second or so compiling; on a slow machine those cold events alone were the p99.
const WARMUP_SECONDS = 3;

export interface E2e {
  readonly rate: number;
  readonly seconds: number;
  readonly posted: number;
  readonly created: number;
  readonly received: number;
  readonly fromCreatedAt: Latency;
  readonly fromResponse: Latency;
}

/** `cwd`: another checkout whose relay runs (relay-baseline.ts checkoutOf), beside this API. */
export async function e2eRun(rate: number, seconds: number, cwd?: string): Promise<E2e> {
  const { mqttUrl } = await benchServices();
  const db = await freshDatabase("e2e");
  const prefix = `bench/${db.name}/`;
  const api = await startApi(db, "info");
  const relay = await startProcess("relay", db, { MQTT_TOPIC_PREFIX: prefix }, "/readyz", cwd);
  const sub = await collect(mqttUrl, prefix);
  const respondedAt = new Map<string, number>();
  try {
    const url = `${api.base}/charges`;
    const authorization = `Bearer ${await tokenFor()}`;
    const post = async (): Promise<void> => {
      const res = await fetch(url, {
        method: "POST",
        headers: { "Content-Type": "application/json", "Idempotency-Key": crypto.randomUUID(), Authorization: authorization },
        body: '{"amountCents":4900}',
      });
      const t = performance.now();
      const body = (await res.json()) as { id?: string };
      if (res.status === 201 && body.id) respondedAt.set(body.id, t);
    };
    await openLoop(rate, WARMUP_SECONDS, post);
    const warm = new Set(respondedAt.keys());
    respondedAt.clear();
    const total = await openLoop(rate, seconds, post);
    const measured = (): Array<{ at: number; envelope: EventEnvelope }> =>
      [...sub.firstArrivals().values()].flatMap(({ at, envelope }) =>
        envelope && !warm.has((envelope.data as EventData<"ChargeCreated">).chargeId) ? [{ at, envelope }] : [],
      );
    // Bounded: a shortfall is reported (received < created), not thrown.
    await waitUntil(() => measured().length >= respondedAt.size, DRAIN_TIMEOUT_MS, "every event").catch(() => {});
    const arrivals = measured();
    const fromCreatedAt: number[] = [];
    const fromResponse: number[] = [];
    for (const { at, envelope } of arrivals) {
      fromCreatedAt.push(performance.timeOrigin + at - Date.parse(envelope.createdAt));
      const r = respondedAt.get((envelope.data as EventData<"ChargeCreated">).chargeId);
      if (r !== undefined) fromResponse.push(at - r);
    }
    return {
      rate,
      seconds,
      posted: total,
      created: respondedAt.size,
      received: arrivals.length,
      fromCreatedAt: latencyOf(fromCreatedAt),
      fromResponse: latencyOf(fromResponse),
    };
  } finally {
    await sub.close();
    await relay.child.stop();
    await api.child.stop();
    await db.drop();
  }
}

/** Open loop: request i leaves at start + i/rate whatever the earlier ones are doing. Returns the requests sent. */
async function openLoop(rate: number, seconds: number, post: () => Promise<void>): Promise<number> {
  const total = Math.round(rate * seconds);
  const inFlight: Promise<void>[] = [];
  const start = performance.now();
  let sent = 0;
  while (sent < total) {
    const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * rate) + 1);
    while (sent < due) {
      inFlight.push(post());
      sent += 1;
    }
    await Bun.sleep(1);
  }
  await Promise.all(inFlight);
  return total;
}
