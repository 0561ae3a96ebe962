// Hands the histograms a process counts itself (http-metrics.ts) to the OpenTelemetry SDK at
// collection: a MetricProducer that every reader (the Prometheus scrape, the OTLP push) asks
// for its data beside the SDK's own instruments. Kept beside telemetry.ts, the one layer that
// knows the SDK; lib/api and lib/relay only record.
import { ValueType } from "@opentelemetry/api";
import {
  AggregationTemporality,
  DataPointType,
  type CollectionResult,
  type HistogramMetricData,
  type MetricProducer,
  type ResourceMetrics,
} from "@opentelemetry/sdk-metrics";
import type { HistogramSource } from "./http-metrics.ts";

type HrTime = [number, number];
const MS_PER_S = 1000;
const NS_PER_MS = 1_000_000;

function hrTimeOf(epochMs: number): HrTime {
  const seconds = Math.floor(epochMs / MS_PER_S);
  return [seconds, Math.round((epochMs - seconds * MS_PER_S) * NS_PER_MS)];
}

/** The sources registered with add() are exported from then on, as cumulative histograms. */
export interface HistogramProducer extends MetricProducer {
  add(source: HistogramSource): void;
}

export function createHistogramProducer(resource: ResourceMetrics["resource"], scopeName = "charges"): HistogramProducer {
  const sources: HistogramSource[] = [];
  return {
    add(source) {
      sources.push(source);
    },
    collect(): Promise<CollectionResult> {
      const endTime = hrTimeOf(Date.now());
      const metrics = sources.map((source) => histogramData(source, endTime));
      return Promise.resolve({ resourceMetrics: { resource, scopeMetrics: metrics.length ? [{ scope: { name: scopeName }, metrics }] : [] }, errors: [] });
    },
  };
}

// Copies of the counts: an exporter may read them after the next request has moved on.
function histogramData(source: HistogramSource, endTime: HrTime): HistogramMetricData {
  const startTime = hrTimeOf(source.startedAt);
  const boundaries = [...source.boundaries];
  const dataPoints: HistogramMetricData["dataPoints"] = [];
  for (const series of source.series()) {
    dataPoints.push({
      attributes: series.attributes,
      startTime,
      endTime,
      value: { buckets: { boundaries, counts: [...series.counts] }, sum: series.sum, count: series.count, min: series.min, max: series.max },
    });
  }
  return {
    descriptor: { name: source.name, description: source.description, unit: "", valueType: ValueType.DOUBLE },
    aggregationTemporality: AggregationTemporality.CUMULATIVE,
    dataPointType: DataPointType.HISTOGRAM,
    dataPoints,
  };
}
