// What every process needs to join its spans to a charge's trace, on the OpenTelemetry API alone
// (edge runtimes load this). A charge crosses processes as a W3C traceparent, written onto the
// key and the outbox row by the request's server span; with no exporter no span is built.
import { context, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Attributes, type Context, type Span } from "@opentelemetry/api";
import { sha256Hex } from "./sha256.ts";

let on = false;

/** True once this process exports traces: the only check a hot path makes when they are off. */
export function tracingOn(): boolean {
  return on;
}

/** Set by the SDK's set-up (tracing.ts) alone. */
export function setTracingOn(value: boolean): void {
  on = value;
}

export function tracer() {
  return trace.getTracer("charges-outbox");
}

const TRACEPARENT_RE = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The context whose parent is `traceparent` (W3C, version 00), or the root for none or a malformed one. */
export function contextOf(traceparent: unknown): Context {
  const match = typeof traceparent === "string" ? TRACEPARENT_RE.exec(traceparent.trim().toLowerCase()) : null;
  if (!match || /^0+$/.test(match[1]!) || /^0+$/.test(match[2]!)) return ROOT_CONTEXT;
  const flags = Number.parseInt(match[3]!, 16) & TraceFlags.SAMPLED;
  return trace.setSpanContext(ROOT_CONTEXT, { traceId: match[1]!, spanId: match[2]!, traceFlags: flags, isRemote: true });
}

/** `span`'s own traceparent, as the next hop's parent. */
export function traceparentOf(span: Span): string {
  const { traceId, spanId, traceFlags } = span.spanContext();
  return `00-${traceId}-${spanId}-${(traceFlags & TraceFlags.SAMPLED) === 0 ? "00" : "01"}`;
}

/** A key as a span may carry it: 16 hex digits of its SHA-256, never the key. */
export function hashedKey(key: string): string {
  return sha256Hex(key).slice(0, 16);
}

export function endSpan(span: Span, error?: string): void {
  if (error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: error }).setAttribute("error.type", error);
  span.end();
}

/** `run` inside a span under `traceparent`: what `run` awaits (a processor call) is its child. */
export async function inSpan<T>(name: string, traceparent: unknown, attributes: Attributes, run: () => Promise<T>, kind: SpanKind = SpanKind.INTERNAL): Promise<T> {
  const span = tracer().startSpan(name, { kind, attributes }, contextOf(traceparent));
  try {
    return await context.with(trace.setSpan(context.active(), span), run);
  } catch (error) {
    endSpan(span, error instanceof Error ? error.name : "error");
    throw error;
  } finally {
    if (span.isRecording()) span.end();
  }
}

const dbAttributes = (operation: string, table: string): Attributes => ({
  "db.system.name": "postgresql",
  "db.operation.name": operation,
  "db.collection.name": table,
});

/** A transaction of `operation` (claim, record, finish, …) as a database client span under `traceparent`. */
export function transactionSpan(operation: string, traceparent: unknown, table: string): Span {
  const options = { kind: SpanKind.CLIENT, attributes: dbAttributes(operation, table) };
  return tracer().startSpan(`${operation} ${table}`, options, contextOf(traceparent));
}

/** `run`, a transaction of `operation`, inside its span under `traceparent`. */
export function inTransaction<T>(operation: string, traceparent: unknown, table: string, run: () => Promise<T>): Promise<T> {
  return inSpan(`${operation} ${table}`, traceparent, dbAttributes(operation, table), run, SpanKind.CLIENT);
}
