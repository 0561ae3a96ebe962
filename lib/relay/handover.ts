// Handing a claim's rows to the broker: each aggregate's rows form a chain, each row sent once
// the one before it is acked (else a refused publish would leave a later event delivered first).
import { within } from "../platform/within.ts";
import type { OutboxRow } from "./outbox-sql.ts";
import type { DeliverFn } from "./publisher.ts";
import type { GcPacer } from "../platform/gc-pacer.ts";
import { SpanKind } from "@opentelemetry/api";
import { contextOf, endSpan, tracer, tracingOn } from "../platform/trace-context.ts";
import type { OutboundMessage } from "./window.ts";
import { buildEnvelope, isPublishableType, topicOf, userPropertiesOf } from "../charges/events.ts";
import { classify, type Outcome } from "./outcome.ts";

export interface HandoverContext {
  readonly topicPrefix: string;
  readonly deliver: DeliverFn;
  readonly broker: { readonly connected: boolean };
  readonly publishTimeoutMs: number;
  readonly pacer: GcPacer;
}

type Chain = readonly OutboxRow[];

// The first `heads` rows are heads, the rest followers. A follower not right after the last row
// of its chain (one between was locked or not due) is `left`: released, claimed again as a head.
export function chainsOf(rows: readonly OutboxRow[], heads: number): { chains: Chain[]; left: OutboxRow[] } {
  const chains = new ByTwoKeys<OutboxRow[]>();
  const all: OutboxRow[][] = [];
  const followers: OutboxRow[] = [];
  const left: OutboxRow[] = [];
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i] as OutboxRow;
    // Two heads of one aggregate only where its sequences repeat: the second waits.
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

/** No `a/b` key string built per row on the hot path. */
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

// Envelope and user properties built only when the window encodes the row: strings built at
// hand-over would wait behind the other lanes' rows, promoted to the old generation.
class RowMessage implements OutboundMessage {
  constructor(
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

/** The wire form of a row, or why it can never be published; `topics` built once, not per row. */
function messageOf(topics: ByTwoKeys<string>, prefix: string, row: OutboxRow): OutboundMessage | string {
  if (!isPublishableType(row.eventType)) return `event_type ${JSON.stringify(row.eventType)} makes an invalid topic`;
  let data: unknown;
  try {
    data = JSON.parse(row.payload);
  } catch {
    return "payload is not valid JSON";
  }
  let topic = topics.get(row.aggregateType, row.eventType);
  if (topic === undefined) {
    topic = topicOf(prefix, row.eventType, row.aggregateType);
    topics.set(row.aggregateType, row.eventType, topic);
  }
  return new RowMessage(topic, row, data);
}

function publishRow(ctx: HandoverContext, topics: ByTwoKeys<string>, row: OutboxRow, answered: (outcome: Outcome) => void): void {
  const message = messageOf(topics, ctx.topicPrefix, row);
  const answer = tracingOn() ? producerSpan(row, typeof message === "string" ? undefined : message.topic, answered) : answered;
  if (typeof message === "string") return answer({ kind: "failed", error: message, park: true });
  try {
    ctx.deliver(message, (error) => answer(error === undefined ? { kind: "acked", at: Date.now() } : classify(error, ctx.broker.connected)));
  } catch (error) {
    answer(classify(error, ctx.broker.connected));
  }
}

/** A producer span, child of the request that wrote the row. */
function producerSpan(row: OutboxRow, topic: string | undefined, answer: (outcome: Outcome) => void): (outcome: Outcome) => void {
  const span = tracer().startSpan(
    `send ${topic ?? row.eventType}`,
    {
      kind: SpanKind.PRODUCER,
      attributes: {
        "messaging.system": "mqtt",
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.destination.name": topic ?? "",
        "messaging.message.id": row.id,
      },
    },
    contextOf(row.traceparent),
  );
  return (outcome) => {
    endSpan(span, outcome.kind === "acked" ? undefined : outcome.kind);
    answer(outcome);
  };
}

const NOT_ATTEMPTED_BEHIND: Outcome = { kind: "released", error: "not attempted: the event before it in its aggregate was not acknowledged" };

// The chains side by side, outcomes in their order; callbacks, not a promise per row (the hot path).
export async function publishChains(ctx: HandoverContext, chains: readonly Chain[]): Promise<Outcome[]> {
  const topics = new ByTwoKeys<string>();
  let total = 0;
  const offsets = chains.map((chain) => (total += chain.length) - chain.length);
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

// For a small claim: Mosquitto (without TCP_NODELAY) holds the PUBACKs of a burst until our
// delayed ACK (40 ms); sent one chain at a time, each PUBLISH carries the ACK.
export async function publishInTurn(ctx: HandoverContext, chains: readonly Chain[]): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  const rest: Outcome = { kind: "released", error: "not attempted: the broker went away during the batch" };
  let gone = false;
  for (const chain of chains) {
    const answers: Outcome[] = gone ? chain.map(() => rest) : await publishChains(ctx, [chain]);
    outcomes.push(...answers);
    const last = answers.find((o) => o.kind !== "acked");
    gone ||= last !== undefined && !(last.kind === "failed" && ctx.broker.connected);
  }
  return outcomes;
}
