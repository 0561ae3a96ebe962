// Metrics for short-lived isolates (the edge worker): each pushes its own deltas over OTLP/HTTP
// under an instance id of its own, and the collector adds them up. No Prometheus exporter.
import { MeterProvider, PeriodicExportingMetricReader } from "@opentelemetry/sdk-metrics";
import { AggregationTemporalityPreference, OTLPMetricExporter } from "@opentelemetry/exporter-metrics-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";

// At most one push per isolate in this time: one per request would double the worker's
// subrequests. An evicted isolate loses at most this much of its counts.
const PUSH_INTERVAL_MS = 15_000;
// workerd runs timers only inside the request that set them: requests start the pushes (pushDue).
const NEVER_MS = 2_147_483_647;

export type PushTelemetry = ReturnType<typeof startPushTelemetry>;

export function startPushTelemetry(serviceName: string, otlpEndpoint: string) {
  const exporter = new OTLPMetricExporter({
    url: `${otlpEndpoint.replace(/\/$/, "")}/v1/metrics`,
    temporalityPreference: AggregationTemporalityPreference.DELTA,
  });
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: NEVER_MS, exportTimeoutMillis: 5_000 });
  const provider = new MeterProvider({
    resource: resourceFromAttributes({ "service.name": serviceName, "service.instance.id": crypto.randomUUID() }),
    readers: [reader],
  });
  let lastPush = Number.NEGATIVE_INFINITY;
  return {
    meter: provider.getMeter("charges"),
    /** A push when PUSH_INTERVAL_MS has passed since the last one, for the request to wait on. */
    pushDue(now = Date.now()): Promise<void> | undefined {
      if (now - lastPush < PUSH_INTERVAL_MS) return undefined;
      lastPush = now;
      return reader.forceFlush();
    },
  };
}
