// charges-outbox/subscriber: the consumer's half of the guarantee as a library. The handler runs
// in the transaction that records the event id in the inbox, so its writes commit once per event
// id whatever the redeliveries, and the PUBACK follows that commit. Typed events in order per
// charge, gaps filled from the API, dead letters for poison and malformed messages (docs/subscriber.md).
import type { Meter } from "@opentelemetry/api";
import type postgres from "postgres";
import { isShareGroup, sharedSubscriptionFilter, subscriptionFilter } from "../charges/events.ts";
import type { MqttProtocol } from "../platform/config.ts";
import type { Sql, Tx } from "../platform/db.ts";
import type { Logger } from "../platform/log.ts";
import type { BrokerMove } from "../platform/mqtt-brokers.ts";
import { startInboxRetention } from "./inbox-retention.ts";
import { withCounts } from "./report.ts";
import type { DeadLetter } from "./sequence-sql.ts";
import { startSubscriber } from "./subscriber.ts";
import { checkMessage, isKnownEvent, type ChargeEvent, type UnknownEvent } from "./typed-events.ts";
import type { Delivery, GapFillApi, Held, SubscriberOptions } from "./types.ts";

export { migrateSubscriber, type SubscriberMigrationOutcome } from "./migrate.ts";
export { checkMessage, isKnownEvent, type ChargeEvent, type UnknownEvent } from "./typed-events.ts";
export type { EventData, EventType } from "../charges/events.ts";
export type { DeadLetter } from "./sequence-sql.ts";
export type { Delivery, Held } from "./types.ts";
export type { BrokerMove } from "../platform/mqtt-brokers.ts";
export type { Logger } from "../platform/log.ts";
export type { MqttProtocol } from "../platform/config.ts";

export type SubscriberTx = Tx;

// Longer than the broker keeps a session (a day): a redelivery always finds its row.
const DEFAULT_INBOX_RETENTION_S = 7 * 86_400;
const DEFAULT_FILL_AFTER_MS = 5000;

export interface CreateSubscriberOptions {
  /** Several to fail over between (mqtt://, mqtts://, ws://, wss://). */
  readonly mqttUrl: string | readonly string[];
  /** The subscriber's own database (migrated by migrateSubscriber). */
  readonly sql: postgres.Sql;
  /** One per kind of consumer; also the default MQTT client id. */
  readonly consumer: string;
  /** Its writes through `tx` commit together with the inbox row, once per event id. */
  readonly handle: (event: ChargeEvent, tx: SubscriberTx) => Promise<void> | void;
  /** An event of a type this version does not know, in its inbox transaction; without it, counted only. */
  readonly onUnknown?: (event: UnknownEvent, tx: SubscriberTx) => Promise<void> | void;
  readonly topicPrefix?: string;
  /** An MQTT 5 shared subscription: the members of a group split the stream (each needs its own `clientId`). */
  readonly shareGroup?: string;
  readonly clientId?: string;
  readonly protocol?: MqttProtocol;
  readonly sessionExpirySeconds?: number;
  /** Order per charge by `sequence` (true by default); false: arrival order. */
  readonly ordered?: boolean;
  /** How long an event ahead of its turn waits for its predecessor before it goes anyway (5 minutes). */
  readonly gapTimeoutMs?: number;
  /** The API to fill a gap from, GET /charges/:id/events, once it lasted `fillAfterMs` (5 s). */
  readonly api?: { readonly url: string; readonly token: string | (() => string | Promise<string>); readonly fillAfterMs?: number };
  /** Handler failures before its event is kept as a dead letter (5). */
  readonly maxHandlerAttempts?: number;
  /** Inbox rows older than this are deleted (7 days); false: never. Keep it above the session expiry. */
  readonly inboxRetentionSeconds?: number | false;
  /** After the commit, before the PUBACK; for a held event, when it is processed (its PUBACK long sent). */
  readonly onDelivery?: (delivery: Delivery) => void;
  /** An event kept until its turn; a redelivery of it is not told again. */
  readonly onHeld?: (held: Held) => void;
  readonly onDeadLetter?: (letter: DeadLetter) => void;
  readonly onMalformed?: (letter: DeadLetter) => void;
  readonly onError?: (description: string) => void;
  readonly onBrokerMove?: (move: BrokerMove) => void;
  /** Where the gap lines go (held, skipped after the timeout, late); none by default. */
  readonly log?: Logger;
  readonly meter?: Meter;
}

export interface SubscriberCounts {
  readonly processed: number;
  readonly duplicates: number;
  /** Events of a type this version does not know. */
  readonly unknown: number;
  readonly malformed: number;
  /** Events the handler kept failing on (or that came after their turn was skipped). */
  readonly deadLettered: number;
  readonly held: number;
  readonly gapsSkipped: number;
  readonly gapsFilled: number;
}

const COUNT_NAMES: readonly (keyof SubscriberCounts)[] =
  ["processed", "duplicates", "unknown", "malformed", "deadLettered", "held", "gapsSkipped", "gapsFilled"];

export interface SubscriberHandle {
  readonly ready: Promise<void>;
  readonly counts: SubscriberCounts;
  readonly connected: boolean;
  /** Its password masked. */
  readonly broker: string;
  /** Lets the event in hand finish and be acknowledged, then disconnects, keeping the session. */
  stop(): Promise<void>;
}

/** Connects, subscribes and processes events until stop(). Throws on options that cannot work. */
export function createSubscriber(options: CreateSubscriberOptions): SubscriberHandle {
  const sql = options.sql as unknown as Sql;
  let unknown = 0;
  const subscriber = startSubscriber(engineOptions(options, sql, () => void (unknown += 1)));
  const retentionS = options.inboxRetentionSeconds ?? DEFAULT_INBOX_RETENTION_S;
  const retention = retentionS === false ? undefined : startInboxRetention(sql, retentionS, options.log ?? quietLog(options));
  return {
    ready: subscriber.ready,
    counts: withCounts({}, COUNT_NAMES, (name) => (name === "unknown" ? unknown : subscriber[name])),
    get connected() {
      return subscriber.connected;
    },
    get broker() {
      return subscriber.broker;
    },
    async stop() {
      await Promise.all([subscriber.close(), retention?.stop()]);
    },
  };
}

function engineOptions(options: CreateSubscriberOptions, sql: Sql, countUnknown: () => void): SubscriberOptions {
  return {
    ...options,
    sql,
    mqttUrl: typeof options.mqttUrl === "string" ? options.mqttUrl : [...options.mqttUrl],
    mqttProtocol: options.protocol,
    topic: topicOf(options),
    handler: (event, tx) => (isKnownEvent(event) ? options.handle(event, tx) : options.onUnknown?.(event, tx)),
    check: checkMessage,
    api: options.api && gapFillApi(options.api),
    // After the commit: a rolled-back attempt is not counted.
    onDelivery: (delivery) => {
      if (!delivery.duplicate && !isKnownEvent(delivery.event)) countUnknown();
      options.onDelivery?.(delivery);
    },
  };
}

function topicOf(options: CreateSubscriberOptions): string {
  const prefix = options.topicPrefix ?? "";
  const group = options.shareGroup;
  if (group === undefined) return subscriptionFilter(prefix);
  if (!isShareGroup(group)) throw new TypeError("createSubscriber: shareGroup must be one topic level without '/', '+' or '#'");
  // The broker keeps what it gave a member in that member's session: one stable id per member.
  if (options.clientId === undefined) throw new TypeError("createSubscriber: shareGroup needs clientId, one stable id per member of the group");
  return sharedSubscriptionFilter(group, prefix);
}

function gapFillApi(api: NonNullable<CreateSubscriberOptions["api"]>): GapFillApi {
  const { token } = api;
  return { url: api.url.replace(/\/+$/, ""), token: typeof token === "string" ? () => token : token, fillAfterMs: api.fillAfterMs ?? DEFAULT_FILL_AFTER_MS };
}

// The retention job's failures go to onError when no logger is given.
function quietLog(options: CreateSubscriberOptions): Logger {
  const tell = (msg: string, fields?: Record<string, unknown>): void => options.onError?.(`${msg}${fields ? ` ${JSON.stringify(fields)}` : ""}`);
  const none = (): void => {};
  return { debug: none, info: none, warn: tell, error: tell };
}
