// The history run's one adapter to the reference subscriber (examples/subscriber.ts on
// lib/subscriber): started as a real process through the test kit, SIGKILLed and started again
// by the nemesis under the same consumer, its "received" lines that were processed (not dropped
// as duplicates) recorded as deliveries when printed. A process killed after its commit and
// before its line leaves the event in its inbox only: those are read from the inbox at the end,
// timed by the inbox. Everything that knows the subscriber's lines or tables is here.
import type { Sql } from "../../lib/platform/db.ts";
import { spawnScript, type Child } from "../../testkit/processes.ts";
import { waitUntil } from "../../testkit/wait.ts";
import { chaosChild } from "../lib/harness.ts";
import type { ArrivalRecord } from "./history.ts";

// Bun, the database and the broker subscription, on a loaded machine.
const READY_TIMEOUT_MS = 30_000;

interface Line {
  readonly event?: string;
  readonly id?: string;
  readonly aggregateId?: string;
  readonly sequence?: number;
  readonly duplicate?: boolean;
}

export class SubscriberDeliveries {
  readonly records: ArrivalRecord[] = [];
  #child: Child | undefined;

  constructor(private readonly env: Record<string, string>, readonly consumer: string) {}

  get running(): boolean {
    return this.#child !== undefined && !this.#child.exited;
  }

  /** Started, and subscribed (its "ready" line). */
  async start(): Promise<void> {
    let ready = false;
    const child = spawnScript("examples/subscriber.ts", {
      ...chaosChild("subscriber", { ...this.env, SUBSCRIBER_CONSUMER: this.consumer }),
      stdout: (text) => {
        if (!text.startsWith("{")) return;
        const line = JSON.parse(text) as Line;
        if (line.event === "ready") ready = true;
        if (line.event === "received" && line.duplicate === false && line.id && line.aggregateId && line.sequence !== undefined) {
          this.records.push({ type: "delivery", consumer: this.consumer, event_id: line.id, aggregate: line.aggregateId, sequence: line.sequence, time: Date.now() });
        }
      },
    });
    this.#child = child;
    try {
      await waitUntil(() => {
        if (child.exited) throw new Error(`the subscriber exited with ${child.exitCode}`);
        return ready;
      }, READY_TIMEOUT_MS, "the subscriber to subscribe");
    } catch (error) {
      // Never two under one client id: the next try starts from none.
      child.kill("SIGKILL");
      await child.done;
      throw error;
    }
  }

  async kill(): Promise<void> {
    const child = this.#child;
    if (!child || child.exited) return;
    child.kill("SIGKILL");
    await child.done;
  }

  async stop(): Promise<void> {
    await this.#child?.stop(5000);
  }

  /** Deliveries its inbox holds that no line told (the process died between its commit and its line). */
  async fromInbox(sql: Sql): Promise<ArrivalRecord[]> {
    const told = new Set(this.records.map((r) => r.event_id));
    const rows = await sql<{ id: string; aggregate: string; sequence: number; at: number }[]>`
      select i.event_id::text as id, o.aggregate_id::text as aggregate, o.sequence, (extract(epoch from i.received_at) * 1000)::float8 as at
        from inbox i join outbox o on o.id = i.event_id where i.consumer = ${this.consumer}`;
    return rows.filter((r) => !told.has(r.id)).map((r) => ({ type: "delivery", consumer: this.consumer, event_id: r.id, aggregate: r.aggregate, sequence: r.sequence, time: r.at, via: "inbox" }));
  }
}
