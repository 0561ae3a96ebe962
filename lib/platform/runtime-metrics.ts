// Process and runtime metrics for the API, the relay and the reference subscriber, through
// the OpenTelemetry API only. Written here rather than taken from
// @opentelemetry/instrumentation-runtime-node or @opentelemetry/host-metrics: those name
// their metrics nodejs.* / v8js.* / process.cpu.time (not the names an operator's Prometheus
// rules expect), lean on Node-only pieces (perf_hooks' event-loop histogram, v8 heap spaces,
// the instrumentation hooks) that Bun and Deno implement partly or not at all, and bring
// dependencies for four numbers `process` already gives on both runtimes. Nothing starts at
// import: startRuntimeMetrics() starts the one timer, stop() ends it.
import type { Meter } from "@opentelemetry/api";

// The event loop is sampled by timer lateness: a timer due every this often fires late by
// as long as the loop was busy (less at most this interval, as a stall may start just after
// a tick). 20 ms sees the stalls that matter (tens of ms and up) at 50 wake-ups a second,
// far below anything the bench can measure. perf_hooks.monitorEventLoopDelay would be
// finer, but one sampler gives the same statistic on every runtime.
const LOOP_SAMPLE_INTERVAL_MS = 20;
// The gauge is the largest lateness over the current and the previous window of this length:
// the last 15 to 30 s whatever the scrape or push period (OTLP pushes every 15 s), and a
// second reader (the OTLP push beside the scrape) cannot reset what the first one sees.
export const LOOP_DELAY_WINDOW_MS = 15_000;
const MS_PER_S = 1000;
const US_PER_S = 1_000_000;

export interface RuntimeMetrics {
  /** Ends the event-loop sampler; the gauges stay registered. */
  stop(): void;
}

/** A database pool as far as the process can know it without the driver's private members. */
export interface PoolView {
  /** db.client.connection.pool.name: the pool's application_name. */
  readonly name: string;
  /** Connections the pool may open (its `max`). */
  readonly max: number;
  /** Connections held by work now: the API's pool gate slots in use, the relay's and subscriber's transactions in progress. */
  readonly busy?: () => number;
  /** Connections open now (open-connections.ts), where the pool counts them. */
  readonly open?: () => number;
}

export function startRuntimeMetrics(meter: Meter): RuntimeMetrics {
  const cpu = meter.createObservableCounter("process_cpu_seconds_total", {
    description: "CPU time of this process, user and system, in seconds",
  });
  cpu.addCallback((result) => {
    const usage = process.cpuUsage();
    result.observe((usage.user + usage.system) / US_PER_S);
  });
  meter
    .createObservableGauge("process_resident_memory_bytes", { description: "Resident set size of this process, in bytes" })
    .addCallback((result) => result.observe(process.memoryUsage().rss));
  meter
    .createObservableGauge("process_heap_used_bytes", { description: "JavaScript heap in use (live objects and garbage not yet collected), in bytes" })
    .addCallback((result) => result.observe(process.memoryUsage().heapUsed));
  const sampler = startLoopSampler();
  meter
    .createObservableGauge("process_event_loop_delay_seconds", {
      description: `Largest event-loop delay (timer lateness) seen over the last ${LOOP_DELAY_WINDOW_MS / MS_PER_S}-${(2 * LOOP_DELAY_WINDOW_MS) / MS_PER_S} s, in seconds`,
    })
    .addCallback((result) => result.observe(sampler.maxMs() / MS_PER_S));
  return { stop: () => sampler.stop() };
}

/** db_client_connections_max, and db_client_connections_busy and _open where the process counts them. */
export function observePool(meter: Meter, pool: PoolView): void {
  const attributes = { "db.client.connection.pool.name": pool.name };
  meter
    .createObservableGauge("db_client_connections_max", { description: "Connections the database pool may open (its size); it opens them on demand" })
    .addCallback((result) => result.observe(pool.max, attributes));
  const open = pool.open;
  if (open !== undefined) {
    meter
      .createObservableGauge("db_client_connections_open", { description: "Database connections the pool holds open now, idle or busy" })
      .addCallback((result) => result.observe(open(), attributes));
  }
  const busy = pool.busy;
  if (busy === undefined) return;
  meter
    .createObservableGauge("db_client_connections_busy", { description: "Database connections held by work now (the API: its pool gate's slots in use; the relay and the subscriber: their transactions in progress, at most the pool's size)" })
    .addCallback((result) => result.observe(busy(), attributes));
}

interface LoopSampler {
  maxMs(): number;
  stop(): void;
}

/** Timer lateness, kept as the maximum per window (see LOOP_DELAY_WINDOW_MS). */
export function startLoopSampler(intervalMs = LOOP_SAMPLE_INTERVAL_MS, windowMs = LOOP_DELAY_WINDOW_MS): LoopSampler {
  let previousMax = 0;
  let currentMax = 0;
  let windowEnds = performance.now() + windowMs;
  let due = performance.now() + intervalMs;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const tick = (): void => {
    const now = performance.now();
    const late = Math.max(0, now - due);
    if (now >= windowEnds) {
      // A window that ended long ago (a stall longer than a window) holds this lateness too.
      previousMax = now - windowEnds < windowMs ? currentMax : 0;
      currentMax = 0;
      windowEnds = now + windowMs;
    }
    if (late > currentMax) currentMax = late;
    due = now + intervalMs;
    timer = unref(setTimeout(tick, intervalMs));
  };
  timer = unref(setTimeout(tick, intervalMs));
  return {
    maxMs: () => Math.max(previousMax, currentMax),
    stop: () => clearTimeout(timer),
  };
}

/** The sampler alone must not keep a process alive: Bun's timers unref(), Deno's by Deno.unrefTimer. */
function unref(timer: ReturnType<typeof setTimeout>): ReturnType<typeof setTimeout> {
  const handle: unknown = timer;
  if (typeof handle === "object" && handle !== null && "unref" in handle && typeof handle.unref === "function") handle.unref();
  else if (typeof handle === "number") (globalThis as { Deno?: { unrefTimer(id: number): void } }).Deno?.unrefTimer(handle);
  return timer;
}
