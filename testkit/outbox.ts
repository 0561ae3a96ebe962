// Helpers for the relay and subscriber tests: pending outbox rows written the way the API
// writes them, a plain MQTT subscriber that records what reaches it, and a private
// Mosquitto the tests may stop and start.
import type { IPublishPacket, MqttClient } from "mqtt";
import { connectMqtt } from "../lib/shared/mqtt-connect.ts";
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Sql } from "../lib/shared/db.ts";
import { freePort } from "../dev/ports.ts";

export interface PendingRow {
  readonly id: string;
  readonly aggregateId: string;
  readonly amountCents: number;
  /** created_at as Postgres renders it in ISO-8601 UTC with microseconds. */
  readonly createdAt: string;
}

/**
 * Inserts `count` charges with their outbox rows, created_at one millisecond apart (oldest
 * first), all in one transaction as of `start`. Returns them oldest first.
 */
export async function insertPending(sql: Sql, count: number, options: { traceparent?: string } = {}): Promise<PendingRow[]> {
  const rows = await sql<PendingRow[]>`
    with c as (
      insert into charges (id, amount_cents, created_at)
      select gen_random_uuid(), 100 + i, now() - make_interval(secs => (${count} - i) / 1000.0)
      from generate_series(1, ${count}) as i
      returning id, amount_cents, created_at
    )
    insert into outbox (id, aggregate_id, event_type, payload, created_at, traceparent)
    select gen_random_uuid(), c.id, 'ChargeCreated',
           json_build_object('chargeId', c.id, 'amountCents', c.amount_cents)::text, c.created_at,
           ${options.traceparent ?? null}::text
    from c
    returning id, aggregate_id as "aggregateId", (payload::json->>'amountCents')::int as "amountCents",
              to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as "createdAt"`;
  return [...rows].sort((a, b) => a.createdAt.localeCompare(b.createdAt));
}

/** One charge and its outbox row in one transaction, as the API writes them. */
export async function insertCharge(sql: Sql): Promise<PendingRow> {
  const chargeId = crypto.randomUUID();
  const id = crypto.randomUUID();
  const amountCents = 4900;
  const [row] = await sql.begin(async (tx) => {
    await tx`insert into charges (id, amount_cents) values (${chargeId}, ${amountCents})`;
    return tx<{ createdAt: string }[]>`
      insert into outbox (id, aggregate_id, event_type, payload)
      values (${id}, ${chargeId}, 'ChargeCreated', ${JSON.stringify({ chargeId, amountCents })})
      returning to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as "createdAt"`;
  });
  return { id, aggregateId: chargeId, amountCents, createdAt: row?.createdAt ?? "" };
}

export interface Received {
  readonly topic: string;
  readonly body: Record<string, unknown>;
  readonly packet: IPublishPacket;
  readonly at: number;
}

export interface Collector {
  readonly messages: Received[];
  ids(): string[];
  /** Resolves when at least `count` messages arrived; rejects after `timeoutMs`. */
  waitFor(count: number, timeoutMs?: number): Promise<Received[]>;
  close(): Promise<void>;
}

/**
 * A plain subscriber on `${prefix}charges/#` that records everything it gets: MQTT 5, or
 * 3.1.1 on a broker that only speaks that (the embedded aedes).
 */
export async function collect(url: string, prefix: string, options: { clientId?: string; persistent?: boolean } = {}): Promise<Collector> {
  const client: MqttClient = connectMqtt(url, {
    clientId: options.clientId ?? `test-collector-${crypto.randomUUID().slice(0, 8)}`,
    clean: !options.persistent,
    properties: options.persistent ? { sessionExpiryInterval: 600 } : undefined,
    reconnectPeriod: 200,
  });
  await new Promise<void>((resolve) => client.once("connect", () => resolve()));
  const messages: Received[] = [];
  const waiters = new Set<() => void>();
  client.on("message", (topic, payload, packet) => {
    messages.push({ topic, body: JSON.parse(payload.toString("utf8")) as Record<string, unknown>, packet, at: performance.now() });
    for (const waiter of waiters) waiter();
  });
  await client.subscribeAsync(`${prefix}charges/#`, { qos: 1 });
  return {
    messages,
    ids: () => messages.map((m) => String(m.body.id)),
    waitFor(count, timeoutMs = 10_000) {
      return new Promise((resolve, reject) => {
        const check = (): void => {
          if (messages.length < count) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve(messages);
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`expected ${count} messages, got ${messages.length} in ${timeoutMs} ms`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    close: () => client.endAsync(),
  };
}

/** Polls until `check` returns true; rejects after `timeoutMs`. */
export async function waitUntil(check: () => boolean | Promise<boolean>, timeoutMs = 10_000, what = "condition"): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

export async function countWhere(sql: Sql, what: "published" | "pending" | "attempted" | "parked"): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*) filter (where published_at is not null)::int as published,
           count(*) filter (where published_at is null)::int as pending,
           count(*) filter (where attempts > 0)::int as attempted,
           count(*) filter (where parked_at is not null)::int as parked
    from outbox`;
  return Number((row as unknown as Record<string, number> | undefined)?.[what] ?? 0);
}

/** A bare client for publishing test messages, on the protocol the broker speaks. */
export async function rawClient(url: string): Promise<MqttClient> {
  const client = connectMqtt(url, { reconnectPeriod: 200 });
  await new Promise<void>((resolve) => client.once("connect", () => resolve()));
  return client;
}

export interface PrivateBroker {
  readonly url: string;
  start(): Promise<void>;
  /** SIGTERM: Mosquitto saves its sessions and queued messages, then exits. */
  stop(): Promise<void>;
}

export function mosquittoInstalled(): boolean {
  return Bun.which("mosquitto") !== null;
}

/** A directory Mosquitto can use: started as root it drops to its own user. */
export function brokerDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "relay-test-mosquitto-"));
  chmodSync(dir, 0o777);
  return dir;
}

/**
 * A Mosquitto of our own on a free port, with persistence so sessions survive a restart.
 * `dir` (from brokerDir()) may hold files the extra configuration names.
 */
export async function privateMosquitto(extraConfig = "", dir = brokerDir()): Promise<PrivateBroker> {
  const port = await freePort();
  const config = join(dir, "mosquitto.conf");
  writeFileSync(
    config,
    `listener ${port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location ${dir}/\n${extraConfig}\n`,
  );
  let child: ChildProcess | undefined;
  const broker: PrivateBroker = {
    url: `mqtt://127.0.0.1:${port}`,
    async start() {
      child = spawn("mosquitto", ["-c", config], { stdio: "ignore" });
      await waitUntil(() => accepts(port), 5000, `mosquitto on ${port}`);
    },
    async stop() {
      const running = child;
      if (!running || running.exitCode !== null) return;
      const exited = new Promise((resolve) => running.once("exit", resolve));
      running.kill("SIGTERM");
      await exited;
    },
  };
  await broker.start();
  return broker;
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: "127.0.0.1" });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}
