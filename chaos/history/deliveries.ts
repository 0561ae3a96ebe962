// The history run's one adapter to the reference subscriber (examples/reference-subscriber.ts
// on lib/subscriber), started as a real process by the test kit (testkit/subscriber.ts),
// SIGKILLed and started again by the nemesis under the same consumer. Its "received" lines
// that were processed (not dropped as duplicates) are recorded as deliveries, timed when read
// (the kit's lines are read every few milliseconds, in the order printed). A process killed
// after its commit and before its line leaves the event in its inbox only: those are read
// from the inbox at the end, timed by the inbox. Everything that knows the subscriber's lines
// or tables is here.
import type { Sql } from "../../lib/platform/db.ts";
import type { Child } from "../../testkit/processes.ts";
import { spawnSubscriber, type SubscriberLine, type SubscriberOptions } from "../../testkit/subscriber.ts";
import type { ArrivalRecord } from "./history.ts";

// How often the lines printed since the last look are timed: far below the gaps the checks
// care about (an event's successor comes after a database commit and a broker round trip).
const READ_EVERY_MS = 5;

export class SubscriberDeliveries {
  readonly records: ArrivalRecord[] = [];
  #child: Child | undefined;
  #lines: SubscriberLine[] = [];
  #read = 0;
  #timer: ReturnType<typeof setInterval> | undefined;

  constructor(private readonly options: SubscriberOptions) {}

  get consumer(): string {
    return this.options.consumer;
  }

  get running(): boolean {
    return this.#child !== undefined && !this.#child.exited;
  }

  /** Started, and subscribed (its "ready" line). */
  async start(): Promise<void> {
    this.readLines();
    const { child, lines } = await spawnSubscriber(this.options);
    this.#child = child;
    this.#lines = lines;
    this.#read = 0;
    this.#timer ??= setInterval(() => this.readLines(), READ_EVERY_MS);
  }

  /** The lines printed since the last look, as deliveries. */
  private readLines(): void {
    const now = Date.now();
    for (; this.#read < this.#lines.length; this.#read++) {
      const line = this.#lines[this.#read]!;
      if (line.event !== "received" || line.duplicate !== false || !line.id || !line.aggregateId || line.sequence === undefined) continue;
      this.records.push({ type: "delivery", consumer: this.consumer, event_id: line.id, aggregate: line.aggregateId, sequence: line.sequence, time: now });
    }
  }

  async kill(): Promise<void> {
    const child = this.#child;
    if (!child || child.exited) return;
    child.kill("SIGKILL");
    await child.done;
    this.readLines();
  }

  async stop(): Promise<void> {
    await this.#child?.stop(5000);
    this.readLines();
    clearInterval(this.#timer);
  }

  /** Deliveries its inbox holds that no line told (the process died between its commit and its line). */
  async fromInbox(sql: Sql): Promise<ArrivalRecord[]> {
    this.readLines();
    const told = new Set(this.records.map((r) => r.event_id));
    const rows = await sql<{ id: string; aggregate: string; sequence: number; at: number }[]>`
      select i.event_id::text as id, o.aggregate_id::text as aggregate, o.sequence, (extract(epoch from i.received_at) * 1000)::float8 as at
        from inbox i join outbox o on o.id = i.event_id where i.consumer = ${this.consumer}`;
    return rows.filter((r) => !told.has(r.id)).map((r) => ({ type: "delivery", consumer: this.consumer, event_id: r.id, aggregate: r.aggregate, sequence: r.sequence, time: r.at, via: "inbox" }));
  }
}
