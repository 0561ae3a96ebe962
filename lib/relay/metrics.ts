// The relay's metrics through the OpenTelemetry API only (no SDK here): without a registered
// MeterProvider these are no-ops; the entrypoint that wants /metrics registers one.
// Labels hold the destination topic only, never a per-event value.
import { metrics } from "@opentelemetry/api";
import type { RelayEvents } from "./loop.ts";

// Row created → PUBACK. Fine below 50 ms (the latency target), coarse up to minutes (backlogs, retries).
const LAG_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

/** `knownDestinations` start at zero: a rate() alert on errors works before the first error. */
export function otelRelayEvents(knownDestinations: readonly string[]): RelayEvents {
  const meter = metrics.getMeter("charges");
  const published = meter.createCounter("outbox_published_total", {
    description: "Outbox rows published and acknowledged by the broker",
  });
  const errors = meter.createCounter("outbox_publish_errors_total", {
    description: "Publishes that failed, timed out or were released because the broker went away",
  });
  const lag = meter.createHistogram("outbox_delivery_lag_seconds", {
    description: "Seconds from the outbox row's created_at to the broker's PUBACK",
    advice: { explicitBucketBoundaries: LAG_BUCKETS_S },
  });
  for (const destination of knownDestinations) {
    published.add(0, { destination });
    errors.add(0, { destination });
  }
  return {
    onPublished(destination, lagSeconds) {
      const attributes = { destination };
      published.add(lagSeconds.length, attributes);
      for (const seconds of lagSeconds) lag.record(seconds, attributes);
    },
    onPublishError(destination, count) {
      errors.add(count, { destination });
    },
  };
}
