// `bun bench/http-metrics-micro.ts`: the cost of one request's record into
// http_server_request_duration_seconds, three ways, in ns per record: this service's
// pre-bucketed counts (lib/platform/http-metrics.ts), an OTel SDK Histogram given one cached
// attributes object per label set, and the same Histogram given a fresh object per call (what
// a naive pipeline does). Not part of `bun run bench`: it measures no service, only the choice
// made in http-metrics.ts (bench/README.md, "Why the code is as it is").
import { MeterProvider } from "@opentelemetry/sdk-metrics";
import { PrometheusExporter } from "@opentelemetry/exporter-prometheus";
import { createHttpServerMetrics, HTTP_DURATION_BUCKETS_S } from "../lib/platform/http-metrics.ts";

// Enough records that a run takes about a second per variant on the bench machine.
const RECORDS = 2_000_000;
const ROUNDS = 5;
// A mix like the API's: a few routes and statuses, most durations in the low buckets.
const LABELS = [
  ["POST", "/charges", 201],
  ["POST", "/charges", 201],
  ["POST", "/charges", 201],
  ["GET", "/charges/:id", 200],
  ["POST", "/charges/:id/refunds", 201],
  ["POST", "/charges", 401],
] as const;
const durations = Array.from({ length: 1024 }, (_, i) => 0.0002 + (i % 37) * 0.0001);

function timeIt(name: string, record: (i: number) => void): number {
  const started = Bun.nanoseconds();
  for (let i = 0; i < RECORDS; i++) record(i);
  const ns = (Bun.nanoseconds() - started) / RECORDS;
  console.log(`${name}: ${ns.toFixed(1)} ns/record`);
  return ns;
}

const ours = createHttpServerMetrics();
// A reader as in the service: without one the SDK keeps no storage and record() does nothing.
const meter = new MeterProvider({ readers: [new PrometheusExporter({ preventServerStart: true })] }).getMeter("micro");
const histogram = meter.createHistogram("h", { advice: { explicitBucketBoundaries: [...HTTP_DURATION_BUCKETS_S] } });
const cached = LABELS.map(([m, r, s]) => ({ "http.request.method": m, "http.route": r, "http.response.status_code": s }));

for (let round = 0; round < ROUNDS; round++) {
  timeIt("pre-bucketed counts", (i) => {
    const [m, r, s] = LABELS[i % LABELS.length]!;
    ours.record(m, r, s, durations[i & 1023]!);
  });
  timeIt("OTel Histogram, cached attributes", (i) => histogram.record(durations[i & 1023]!, cached[i % LABELS.length]));
  timeIt("OTel Histogram, fresh attributes", (i) => {
    const [m, r, s] = LABELS[i % LABELS.length]!;
    histogram.record(durations[i & 1023]!, { "http.request.method": m, "http.route": r, "http.response.status_code": s });
  });
}
