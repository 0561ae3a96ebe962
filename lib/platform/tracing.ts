// The tracing SDK, set up by the entrypoints when OTEL_EXPORTER_OTLP_ENDPOINT is set: spans
// batched and exported over OTLP/HTTP. With no endpoint nothing here runs, and the spans of
// trace-context.ts are never built.
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import type { Resource } from "@opentelemetry/resources";
import { BatchSpanProcessor, TracerProvider } from "@opentelemetry/sdk-trace";
import { setTracingOn } from "./trace-context.ts";

export interface Tracing {
  shutdown(): Promise<void>;
}

/**
 * Registers the tracer provider, the W3C propagator and an async-context manager (a processor
 * call is a child of the step that awaits it, however deep the awaits) for the whole process.
 */
export function startTracing(resource: Resource, otlpEndpoint: string): Tracing {
  const exporter = new OTLPTraceExporter({ url: `${otlpEndpoint.replace(/\/$/, "")}/v1/traces` });
  const provider = new TracerProvider({ resource, spanProcessors: [new BatchSpanProcessor({ exporter })] });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(provider);
  setTracingOn(true);
  return {
    async shutdown() {
      setTracingOn(false);
      await provider.shutdown();
    },
  };
}
