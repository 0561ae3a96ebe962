// The OpenTelemetry SDK, wired in the entrypoints' layer so the rest of lib/ depends on the API only.
// Metrics are served as Prometheus text on /metrics; OTEL_EXPORTER_OTLP_ENDPOINT pushes them, and traces.
import { metrics, ValueType } from "@opentelemetry/api";
import {
  AggregationTemporality,
  DataPointType,
  MeterProvider,
  PeriodicExportingMetricReader,
  type HistogramMetricData,
  type MetricProducer,
  type MetricReader,
} from "@opentelemetry/sdk-metrics";
import { PrometheusExporter, PrometheusSerializer } from "@opentelemetry/exporter-prometheus";
import { OTLPMetricExporter } from "@opentelemetry/exporter-metrics-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import type { HttpServerMetrics } from "./http-metrics.ts";
import { startTracing, type Tracing } from "./tracing.ts";

// OTLP push interval: the collector's usual scrape period, so both views agree.
const OTLP_EXPORT_INTERVAL_MS = 15_000;

export type Telemetry = ReturnType<typeof startTelemetry>;

export function startTelemetry(serviceName: string, otlpEndpoint?: string, setGlobal = true) {
  const resource = resourceFromAttributes({ "service.name": serviceName });
  const histograms: HttpServerMetrics[] = [];
  // Every reader (the scrape, the OTLP push) asks it for the histograms beside the SDK's instruments.
  const producer: MetricProducer = {
    collect() {
      const endTime = hrTimeOf(Date.now());
      const data = histograms.map((source) => histogramData(source, endTime));
      const scopeMetrics = data.length ? [{ scope: { name: "charges" }, metrics: data }] : [];
      return Promise.resolve({ resourceMetrics: { resource, scopeMetrics }, errors: [] });
    },
  };
  const metricProducers = [producer];
  // The SDK's own HTTP server stays off: /metrics is a route of our own servers.
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
    /** GET /metrics: the current values as Prometheus text exposition. */
    async scrape(): Promise<Response> {
      const { resourceMetrics } = await prometheus.collect();
      return new Response(serializer.serialize(resourceMetrics), {
        headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" },
      });
    },
    /** Exports a histogram the process counts itself on /metrics and over OTLP. */
    addHistogram: (source: HttpServerMetrics): void => void histograms.push(source),
    async shutdown(): Promise<void> {
      await Promise.all([provider.shutdown(), tracing?.shutdown()]);
    },
  };
}

function hrTimeOf(epochMs: number): [number, number] {
  const seconds = Math.floor(epochMs / 1000);
  return [seconds, Math.round((epochMs - seconds * 1000) * 1_000_000)];
}

// A cumulative histogram of copies of the counts: an exporter may read them after the next
// request has moved on.
function histogramData(source: HttpServerMetrics, endTime: [number, number]): HistogramMetricData {
  const startTime = hrTimeOf(source.startedAt);
  const boundaries = [...source.boundaries];
  const dataPoints = [...source.series()].map((series) => ({
    attributes: series.attributes,
    startTime,
    endTime,
    value: { buckets: { boundaries, counts: [...series.counts] }, sum: series.sum, count: series.count, min: series.min, max: series.max },
  }));
  return {
    descriptor: { name: source.name, description: source.description, unit: "", valueType: ValueType.DOUBLE },
    aggregationTemporality: AggregationTemporality.CUMULATIVE,
    dataPointType: DataPointType.HISTOGRAM,
    dataPoints,
  };
}
