// (5) End-to-end latency: charges posted at a steady rate while the real relay runs; a bare
// mqtt.js subscriber on the same machine takes commit → receipt as receipt time minus the
// event's createdAt (the outbox row's now(), i.e. its transaction start: at or before the
// commit, so the figure errs on the slow side). Receipt minus the POST's response time is
// kept too (after the commit, so it errs on the fast side).
import mqtt from "mqtt";
import { startApi } from "./api-bench.ts";
import { freshDatabase, latencyOf, MQTT_URL, startChild, type Latency } from "./support.ts";

export interface E2e {
  readonly rate: number;
  readonly seconds: number;
  readonly posted: number;
  readonly created: number;
  readonly received: number;
  readonly fromCreatedAt: Latency;
  readonly fromResponse: Latency;
}

const now = (): number => performance.timeOrigin + performance.now();

export async function e2eRun(rate: number, seconds: number): Promise<E2e> {
  const db = await freshDatabase("e2e");
  const prefix = `bench/${db.name}/`;
  const api = await startApi(db, "info");
  const relay = await startChild("relay.ts", { DATABASE_URL: db.url, MQTT_URL, MQTT_TOPIC_PREFIX: prefix }, "/readyz", "RELAY_PORT");
  const sub = await mqtt.connectAsync(MQTT_URL, { protocolVersion: 5, clean: true, reconnectPeriod: 0 });
  const fromCreatedAt: number[] = [];
  const receivedAt = new Map<string, number>();
  const respondedAt = new Map<string, number>();
  try {
    sub.on("message", (_topic, payload) => {
      const t = now();
      const event = JSON.parse(payload.toString()) as { createdAt: string; data: { chargeId: string } };
      if (receivedAt.has(event.data.chargeId)) return; // a redelivery, not a new receipt
      receivedAt.set(event.data.chargeId, t);
      fromCreatedAt.push(t - Date.parse(event.createdAt));
    });
    await sub.subscribeAsync(`${prefix}charges/ChargeCreated`, { qos: 1 });
    const total = Math.round(rate * seconds);
    const url = `http://127.0.0.1:${api.port}/charges`;
    const inFlight: Promise<void>[] = [];
    const post = async (): Promise<void> => {
      const res = await fetch(url, {
        method: "POST",
        headers: { "Content-Type": "application/json", "Idempotency-Key": crypto.randomUUID() },
        body: '{"amountCents":4900}',
      });
      const t = now();
      const body = (await res.json()) as { id?: string };
      if (res.status === 201 && body.id) respondedAt.set(body.id, t);
    };
    // Open loop: request i leaves at start + i/rate whatever the earlier ones are doing.
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
    const deadline = Date.now() + 10_000;
    while (receivedAt.size < respondedAt.size && Date.now() < deadline) await Bun.sleep(20);
    const fromResponse: number[] = [];
    for (const [id, t] of receivedAt) {
      const r = respondedAt.get(id);
      if (r !== undefined) fromResponse.push(t - r);
    }
    return {
      rate,
      seconds,
      posted: total,
      created: respondedAt.size,
      received: receivedAt.size,
      fromCreatedAt: latencyOf(fromCreatedAt),
      fromResponse: latencyOf(fromResponse),
    };
  } finally {
    await sub.endAsync();
    await relay.stop();
    await api.stop();
    await db.drop();
  }
}
