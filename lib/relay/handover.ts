// Handing a claim's rows to the broker, each aggregate's in sequence order. A claim holds
// heads (each its aggregate's oldest unpublished event) and their followers (outbox-sql.ts
// claimHeads, claimFollowers). A follower goes to the broker only once the broker acknowledged the row before
// it: had it gone out with that row, a refused or lost publish would leave the later event
// delivered first. So each aggregate's rows form a chain, published one after another, while
// the chains of different aggregates go out side by side.
import { within } from "../platform/within.ts";
import type { GcPacer } from "../platform/gc-pacer.ts";
import type { OutboxRow } from "./outbox-sql.ts";
import type { DeliverFn } from "./publisher.ts";
import type { OutboundMessage } from "./window.ts";
import { buildEnvelope, isPublishableType, topicOf, userPropertiesOf } from "../charges/events.ts";
import { classify, type Outcome } from "./outcome.ts";

export interface HandoverContext {
  readonly topicPrefix: string;
  readonly deliver: DeliverFn;
  readonly broker: { readonly connected: boolean };
  readonly publishTimeoutMs: number;
  /** Told of each row answered. */
  readonly pacer: GcPacer;
}

/** One aggregate's rows of a claim: its head, then the followers in sequence order. */
export type Chain = readonly OutboxRow[];

/**
 * The claim's chains, in the heads' created_at order. Its first `heads` rows are heads, each
 * the oldest unpublished event of its aggregate when claimed (claimHeads), the rest followers
 * of a head of the same claim (claimFollowers): a follower goes to the broker only after the
 * row before it is acknowledged. (Told by their place, not by a column: one less value per
 * row to send and parse.) A follower that does not come right after the one before it (a row
 * between them was locked or not due) is left out with the rest of its chain: it is released,
 * untouched, and claimed again once it is a head.
 */
export function chainsOf(rows: readonly OutboxRow[], heads: number): { chains: Chain[]; left: OutboxRow[] } {
  const chains = new ByTwoKeys<OutboxRow[]>();
  const all: OutboxRow[][] = [];
  const followers: OutboxRow[] = [];
  const left: OutboxRow[] = [];
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i] as OutboxRow;
    // Two heads of one aggregate only where its sequences repeat (never written so): the
    // first goes, the other waits for the next claim.
    if (i >= heads) followers.push(row);
    else if (chains.get(row.aggregateType, row.aggregateId) !== undefined) left.push(row);
    else {
      const chain = [row];
      chains.set(row.aggregateType, row.aggregateId, chain);
      all.push(chain);
    }
  }
  followers.sort((a, b) => a.sequence - b.sequence);
  for (const row of followers) {
    const chain = chains.get(row.aggregateType, row.aggregateId);
    const last = chain?.at(-1);
    if (chain && last && row.sequence === last.sequence + 1) chain.push(row);
    else left.push(row);
  }
  return { chains: all, left };
}

/**
 * Values under two string keys, a map per first key: no `a/b` key string built (and hashed)
 * per row on the drain's hot path. A claim's chains by aggregate type and id; a hand-over's topics by aggregate
 * type and event type.
 */
class ByTwoKeys<V> {
  private readonly byFirst = new Map<string, Map<string, V>>();
  get(a: string, b: string): V | undefined {
    return this.byFirst.get(a)?.get(b);
  }
  set(a: string, b: string, value: V): void {
    let second = this.byFirst.get(a);
    if (second === undefined) this.byFirst.set(a, (second = new Map()));
    second.set(b, value);
  }
}

/**
 * A row as the window sends it. The envelope and the user properties are built when the
 * window encodes the PUBLISH, not when the row is handed over (the topic is one string shared
 * by the hand-over's rows of an event type, Topics): a drain's rows wait
 * behind the other lanes' for up to a few hundred milliseconds, across several young
 * collections (lib/platform/gc-pacer.ts), and what they hold then is promoted to the old
 * generation, whose collections free it tens of megabytes at a time for the allocator to hand
 * back to the kernel. Built at the send, these strings die young.
 */
class RowMessage implements OutboundMessage {
  constructor(
    /** Shared by the hand-over's rows of its event type (Topics). */
    readonly topic: string,
    private readonly row: OutboxRow,
    private readonly data: unknown,
  ) {}
  get key(): string {
    return this.row.aggregateId;
  }
  get payload(): string {
    const { id, eventType: type, aggregateId, tenant: tenantId, createdAt, sequence } = this.row;
    return buildEnvelope({ id, type, aggregateId, tenantId, createdAt, sequence, data: this.data });
  }
  get userProperties(): Record<string, string> {
    const { id, eventType: type, tenant: tenantId, sequence, traceparent } = this.row;
    return userPropertiesOf({ id, type, tenantId, sequence, traceparent });
  }
}

/**
 * The topics of one hand-over's rows, each built once per aggregate and event type rather than
 * per row: a concatenation, which the encoder then flattened, for every row.
 */
class Topics {
  private readonly built = new ByTwoKeys<string>();
  constructor(private readonly prefix: string) {}
  of(row: OutboxRow): string {
    let topic = this.built.get(row.aggregateType, row.eventType);
    if (topic === undefined) this.built.set(row.aggregateType, row.eventType, (topic = topicOf(this.prefix, row.eventType, row.aggregateType)));
    return topic;
  }
}

/** The wire form of a row, or why it can never be published (checked at hand-over). */
function messageOf(topics: Topics, row: OutboxRow): OutboundMessage | string {
  if (!isPublishableType(row.eventType)) return `event_type ${JSON.stringify(row.eventType)} makes an invalid topic`;
  let data: unknown;
  try {
    data = JSON.parse(row.payload);
  } catch {
    return "payload is not valid JSON";
  }
  return new RowMessage(topics.of(row), row, data);
}

/** Hands one row to the broker; `answer` gets its outcome (at once when it cannot be published). */
function publishRow(ctx: HandoverContext, topics: Topics, row: OutboxRow, answer: (outcome: Outcome) => void): void {
  const message = messageOf(topics, row);
  if (typeof message === "string") return answer({ kind: "failed", error: message, park: true });
  try {
    ctx.deliver(message, (error) => answer(error === undefined ? { kind: "acked", at: Date.now() } : classify(error, ctx.broker.connected)));
  } catch (error) {
    answer(classify(error, ctx.broker.connected));
  }
}

const NOT_ATTEMPTED_BEHIND: Outcome = { kind: "released", error: "not attempted: the event before it in its aggregate was not acknowledged" };

/**
 * Publishes the chains side by side, each row of a chain after the PUBACK of the one before,
 * and waits for every outcome, or until the timeout: a row sent and unanswered then has timed
 * out; a row never sent (its chain stopped, or the timeout came first) is released untouched.
 * Outcomes come in the chains' order, row by row. Callbacks rather than a promise per row (and
 * its reactions): a drain hands over tens of thousands of rows a second.
 */
export async function publishChains(ctx: HandoverContext, chains: readonly Chain[]): Promise<Outcome[]> {
  const topics = new Topics(ctx.topicPrefix);
  const offsets: number[] = [];
  let total = 0;
  for (const chain of chains) {
    offsets.push(total);
    total += chain.length;
  }
  const outcomes: (Outcome | undefined)[] = new Array(total);
  const sent: boolean[] = new Array(total).fill(false);
  let left = chains.length;
  let closed = false;
  let allIn: () => void = () => {};
  const all = new Promise<void>((resolve) => (allIn = resolve));
  const step = (chain: Chain, offset: number, k: number): void => {
    const row = chain[k];
    if (row === undefined || closed) {
      if (--left === 0) allIn();
      return;
    }
    sent[offset + k] = true;
    publishRow(ctx, topics, row, (outcome) => {
      outcomes[offset + k] = outcome;
      ctx.pacer.count(1);
      if (outcome.kind === "acked") step(chain, offset, k + 1);
      else if (--left === 0) allIn();
    });
  };
  chains.forEach((chain, i) => step(chain, offsets[i] ?? 0, 0));
  if (left === 0) allIn();
  await within(all, ctx.publishTimeoutMs);
  // A PUBACK after this point must not send the next row of its chain: the batch is settled.
  closed = true;
  const timeout = classify(new Error(`no PUBACK within ${ctx.publishTimeoutMs} ms`), ctx.broker.connected);
  return Array.from(outcomes, (o, i) => o ?? (sent[i] ? timeout : NOT_ATTEMPTED_BEHIND));
}

/**
 * One row at a time, each awaiting its PUBACK. For a small claim (the backlog is drained):
 * Mosquitto, by default without TCP_NODELAY, answers a burst of PUBLISHes with one PUBACK
 * segment and holds the next until ours is acknowledged, and a client that has nothing more
 * to send acknowledges only after its delayed-ACK timer (40 ms on Linux) per burst, which would
 * be most of the commit → subscriber latency at low rates. One at a time, each PUBLISH
 * acknowledges the previous PUBACK; it costs a local round trip per row, only when few rows are due.
 * After a timeout or a lost connection the rest of the batch is released without an attempt.
 */
export async function publishInTurn(ctx: HandoverContext, chains: readonly Chain[]): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  const rest: Outcome = { kind: "released", error: "not attempted: the broker went away during the batch" };
  let gone = false;
  for (const chain of chains) {
    if (gone) {
      for (let k = 0; k < chain.length; k++) outcomes.push(rest);
      continue;
    }
    const answers = await publishChains(ctx, [chain]);
    outcomes.push(...answers);
    const last = answers.find((o) => o.kind !== "acked");
    gone = last !== undefined && !(last.kind === "failed" && ctx.broker.connected);
  }
  return outcomes;
}
