// The OpenTelemetry SDK, wired here in the entrypoints' layer so the rest of lib/ depends on
// the API package only. Metrics are served as Prometheus text on /metrics; when
// OTEL_EXPORTER_OTLP_ENDPOINT is set they are also pushed over OTLP/HTTP, and traces exported.
import { metrics } from "@opentelemetry/api";
import { MeterProvider, PeriodicExportingMetricReader, type MetricReader } from "@opentelemetry/sdk-metrics";
import { PrometheusExporter, PrometheusSerializer } from "@opentelemetry/exporter-prometheus";
import { OTLPMetricExporter } from "@opentelemetry/exporter-metrics-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { createHistogramProducer } from "./histogram-producer.ts";
import type { HistogramSource } from "./http-metrics.ts";
import { startTracing, type Tracing } from "./tracing.ts";

// OTLP push interval: the collector's usual scrape period, so both views agree.
const OTLP_EXPORT_INTERVAL_MS = 15_000;

export interface Telemetry {
  readonly provider: MeterProvider;
  /** GET /metrics: the current values as Prometheus text exposition. */
  scrape(): Promise<Response>;
  /** Exports a histogram the process counts itself (http-metrics.ts) on /metrics and over OTLP. */
  addHistogram(source: HistogramSource): void;
  shutdown(): Promise<void>;
}

export function startTelemetry(serviceName: string, otlpEndpoint?: string, setGlobal = true): Telemetry {
  // The SDK's own HTTP server stays off: /metrics is a route of our own servers.
  const resource = resourceFromAttributes({ "service.name": serviceName });
  const histograms = createHistogramProducer(resource);
  const metricProducers = [histograms];
  const prometheus = new PrometheusExporter({ preventServerStart: true, withoutScopeInfo: true, withoutTargetInfo: true, metricProducers });
  const readers: MetricReader[] = [prometheus];
  if (otlpEndpoint) {
    const url = `${otlpEndpoint.replace(/\/$/, "")}/v1/metrics`;
    readers.push(new PeriodicExportingMetricReader({ exporter: new OTLPMetricExporter({ url }), exportIntervalMillis: OTLP_EXPORT_INTERVAL_MS, metricProducers }));
  }
  const provider = new MeterProvider({ resource, readers });
  if (setGlobal) metrics.setGlobalMeterProvider(provider);
  const tracing: Tracing | undefined = otlpEndpoint && setGlobal ? startTracing(resource, otlpEndpoint) : undefined;
  const serializer = new PrometheusSerializer(undefined, false, undefined, true, true);
  return {
    provider,
    async scrape() {
      const { resourceMetrics } = await prometheus.collect();
      return new Response(serializer.serialize(resourceMetrics), {
        headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" },
      });
    },
    addHistogram: (source) => histograms.add(source),
    async shutdown() {
      await Promise.all([provider.shutdown(), tracing?.shutdown()]);
    },
  };
}
