// charges-outbox/subscriber: the consumer's half of the guarantee as a library; the handler's writes
// commit with the event's inbox row, then the PUBACK goes (docs/subscriber.md).
import { isShareGroup, sharedSubscriptionFilter, subscriptionFilter } from "../charges/events.ts";
import type { Sql } from "../platform/db.ts";
import type { Logger } from "../platform/log.ts";
import { startInboxRetention } from "./inbox-retention.ts";
import { withCounts } from "./report.ts";
import { startSubscriber } from "./subscriber.ts";
import { checkMessage, isKnownEvent } from "./typed-events.ts";
import { COUNT_NAMES, type CreateSubscriberOptions, type GapFillApi, type SubscriberCounts, type SubscriberOptions } from "./types.ts";

export { migrateSubscriber, type SubscriberMigrationOutcome } from "./migrate.ts";
export { checkMessage, isKnownEvent, type ChargeEvent, type UnknownEvent } from "./typed-events.ts";
export type { EventData, EventType } from "../charges/events.ts";
export type { DeadLetter } from "./sequence-sql.ts";
export type { CreateSubscriberOptions, Delivery, Held, SubscriberCounts, SubscriberTx } from "./types.ts";
export type { BrokerMove } from "../platform/mqtt-brokers.ts";
export type { Logger } from "../platform/log.ts";
export type { MqttProtocol } from "../platform/config.ts";

// Longer than the broker keeps a session (a day): a redelivery always finds its row.
const DEFAULT_INBOX_RETENTION_S = 7 * 86_400;
const DEFAULT_FILL_AFTER_MS = 5000;
const HANDLE_COUNTS: readonly (keyof SubscriberCounts)[] = COUNT_NAMES.map((n) => (n === "rejected" ? "unknown" : n));

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
    counts: withCounts({}, HANDLE_COUNTS, (name) => (name === "unknown" ? unknown : subscriber[name])),
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
