// Events checked on receipt: a known type against its envelope schema, an unknown one on the common
// fields only, so producers can add types without stopping their subscribers.
import { Type as t, type TObject } from "@sinclair/typebox";
import { TypeCompiler, type TypeCheck } from "@sinclair/typebox/compiler";
import { ENVELOPE_SCHEMAS, EVENT_TYPES, UUID_PATTERN, type EventData, type EventEnvelope, type EventType } from "../charges/events.ts";

/** One event of a type this version knows, checked against its schema: `data` is typed by `type`. */
export type ChargeEvent = {
  readonly [T in EventType]: Required<Omit<EventEnvelope, "type" | "data">> &
    { readonly type: T; readonly data: EventData<T> };
}[EventType];

/** An event of a type this version does not know: its common fields are checked, `data` is not. */
export type UnknownEvent = EventEnvelope;

const KNOWN: ReadonlySet<string> = new Set(EVENT_TYPES);
const UUID = new RegExp(UUID_PATTERN);

export function isKnownEvent(event: EventEnvelope | ChargeEvent): event is ChargeEvent {
  return KNOWN.has(event.type);
}

type Checkers = { readonly common: TypeCheck<TObject>; readonly byType: ReadonlyMap<string, TypeCheck<TObject>> };

// Compiled on first use, not at import: compiling builds functions, which edge runtimes refuse at load.
let checkers: Checkers | undefined;
function compiled(): Checkers {
  checkers ??= {
    common: TypeCompiler.Compile(
      t.Object({
        id: t.String({ pattern: UUID_PATTERN }),
        type: t.String({ minLength: 1 }),
        aggregateId: t.String({ minLength: 1 }),
        tenantId: t.Optional(t.String({ minLength: 1 })),
        createdAt: t.String({ minLength: 1 }),
        sequence: t.Optional(t.Integer({ minimum: 1 })),
      }),
    ),
    byType: new Map(EVENT_TYPES.map((type) => [type, TypeCompiler.Compile(ENVELOPE_SCHEMAS[type])])),
  };
  return checkers;
}

/** Reads a received payload: an event (known or not), or malformed with the first reason found. */
export function checkMessage(payload: Uint8Array | string): Checked {
  let value: unknown;
  try {
    value = JSON.parse(typeof payload === "string" ? payload : new TextDecoder().decode(payload));
  } catch {
    return { kind: "malformed", reason: "not JSON" };
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return { kind: "malformed", reason: "not a JSON object" };
  const { common, byType } = compiled();
  const record = value as Record<string, unknown>;
  const id = typeof record.id === "string" && UUID.test(record.id) ? record.id : undefined;
  const check = (typeof record.type === "string" && byType.get(record.type)) || common;
  if (!check.Check(value)) return { kind: "malformed", reason: firstError(check, value), ...(id !== undefined && { eventId: id }) };
  if (!("data" in record)) return { kind: "malformed", reason: "/data: missing", ...(id !== undefined && { eventId: id }) };
  return { kind: "event", event: record as unknown as EventEnvelope };
}

function firstError(check: TypeCheck<TObject>, value: unknown): string {
  const error = check.Errors(value).First();
  return error ? `${error.path || "/"}: ${error.message}` : "does not match its schema";
}

export type Checked =
  | { readonly kind: "event"; readonly event: EventEnvelope }
  /** `eventId`: the id it names, when it names a valid one. */
  | { readonly kind: "malformed"; readonly reason: string; readonly eventId?: string };
