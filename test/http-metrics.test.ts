// http_server_request_duration_seconds as the SDK exports it (recorded values placed in
// known buckets, exact counts, the method and route bounds), and the process and pool
// metrics, without a database: a telemetry instance of its own and its Prometheus text.
import { afterAll, expect, test } from "bun:test";
import { startTelemetry } from "../lib/platform/telemetry.ts";
import { createHttpServerMetrics, HTTP_DURATION_BUCKETS_S, OTHER_METHOD, UNMATCHED_ROUTE } from "../lib/platform/http-metrics.ts";
import { observePool, startLoopSampler, startRuntimeMetrics } from "../lib/platform/runtime-metrics.ts";
import { labelValues, samples, valueOf } from "../testkit/prometheus.ts";

const telemetry = startTelemetry("http-metrics-test", undefined, false);
const http = createHttpServerMetrics();
telemetry.addHistogram(http);
const meter = telemetry.provider.getMeter("charges");
const runtime = startRuntimeMetrics(meter);
afterAll(async () => {
  runtime.stop();
  await telemetry.shutdown();
});

const NAME = "http_server_request_duration_seconds";
const scrape = async (): Promise<string> => (await telemetry.scrape()).text();
const series = (method: string, route: string, status: string) => ({ http_request_method: method, http_route: route, http_response_status_code: status });
const bucket = (labels: Record<string, string>, le: string) => ({ ...labels, le });

test("recorded durations land in their buckets (upper bounds inclusive), with exact counts and sums", async () => {
  const refund = series("POST", "/charges/:id/refunds", "201");
  http.record("POST", "/charges/:id/refunds", 201, 0.0004); // le 0.0005
  http.record("POST", "/charges/:id/refunds", 201, 0.001); // le 0.001: a bound is inclusive
  http.record("POST", "/charges/:id/refunds", 201, 0.3); // le 0.5
  http.record("POST", "/charges/:id/refunds", 201, 11); // above every bound: +Inf only
  const text = await scrape();
  expect(text).toContain(`# TYPE ${NAME} histogram`);
  const at = (le: string) => valueOf(text, `${NAME}_bucket`, bucket(refund, le));
  expect(at("0.00025")).toBe(0);
  expect(at("0.0005")).toBe(1);
  expect(at("0.001")).toBe(2);
  expect(at("0.25")).toBe(2);
  expect(at("0.5")).toBe(3);
  expect(at("10")).toBe(3);
  expect(at("+Inf")).toBe(4);
  expect(valueOf(text, `${NAME}_count`, refund)).toBe(4);
  expect(valueOf(text, `${NAME}_sum`, refund)).toBeCloseTo(11.3014, 6);
  // Every bound is on the page, once per series.
  const les = samples(text).filter((s) => s.name === `${NAME}_bucket` && s.labels.http_route === "/charges/:id/refunds").map((s) => s.labels.le);
  expect(les).toEqual([...HTTP_DURATION_BUCKETS_S.map(String), "+Inf"]);
});

test("a status of its own is a series of its own; an unknown method is _OTHER, never a new label value", async () => {
  http.record("GET", "/healthz", 200, 0.0001);
  http.record("GET", "/healthz", 503, 0.0001);
  for (const method of ["PURGE", "get", "X-EVIL-1", "X-EVIL-2"]) http.record(method, UNMATCHED_ROUTE, 404, 0.0001);
  const text = await scrape();
  expect(valueOf(text, `${NAME}_count`, series("GET", "/healthz", "200"))).toBe(1);
  expect(valueOf(text, `${NAME}_count`, series("GET", "/healthz", "503"))).toBe(1);
  expect(valueOf(text, `${NAME}_count`, series(OTHER_METHOD, UNMATCHED_ROUTE, "404"))).toBe(4);
  const methods = new Set(samples(text).filter((s) => s.name === `${NAME}_count`).map((s) => s.labels.http_request_method));
  expect([...methods].sort()).toEqual(["GET", "POST", OTHER_METHOD].sort());
  expect(labelValues(text).some((v) => v.includes("EVIL") || v === "PURGE" || v === "get")).toBe(false);
});

test("process metrics: CPU seconds, resident memory, heap in use and the loop delay are on the page", async () => {
  const text = await scrape();
  expect(text).toContain("# TYPE process_cpu_seconds_total counter");
  expect(valueOf(text, "process_cpu_seconds_total")).toBeGreaterThan(0);
  expect(text).toContain("# TYPE process_resident_memory_bytes gauge");
  expect(valueOf(text, "process_resident_memory_bytes")).toBeGreaterThan(1_000_000);
  expect(valueOf(text, "process_heap_used_bytes")).toBeGreaterThan(100_000);
  expect(valueOf(text, "process_event_loop_delay_seconds")).toBeGreaterThanOrEqual(0);
});

test("the loop sampler sees a 150 ms stall as a delay of at least 100 ms", async () => {
  const sampler = startLoopSampler(10, 60_000);
  try {
    await Bun.sleep(30);
    const until = performance.now() + 150;
    while (performance.now() < until) {
      // the stall: the loop is held
    }
    await Bun.sleep(30);
    expect(sampler.maxMs()).toBeGreaterThanOrEqual(100);
  } finally {
    sampler.stop();
  }
});

test("pool gauges: the size, and the busy count read at collection", async () => {
  let busy = 3;
  observePool(meter, { name: "test-pool", max: 8, busy: () => busy });
  observePool(meter, { name: "ungated-pool", max: 2 });
  const pool = (name: string) => ({ db_client_connection_pool_name: name });
  let text = await scrape();
  expect(valueOf(text, "db_client_connections_max", pool("test-pool"))).toBe(8);
  expect(valueOf(text, "db_client_connections_busy", pool("test-pool"))).toBe(3);
  expect(valueOf(text, "db_client_connections_max", pool("ungated-pool"))).toBe(2);
  expect(valueOf(text, "db_client_connections_busy", pool("ungated-pool"))).toBeUndefined();
  busy = 0;
  text = await scrape();
  expect(valueOf(text, "db_client_connections_busy", pool("test-pool"))).toBe(0);
});
