// Process and runtime metrics on the OpenTelemetry API, named as Prometheus rules expect and read
// from `process` alike on Bun and Deno.
import type { Attributes, Meter } from "@opentelemetry/api";

// The event loop is sampled by timer lateness, the same statistic on every runtime: 20 ms sees
// the stalls that matter (tens of ms and up) at a cost the bench cannot measure.
const LOOP_SAMPLE_INTERVAL_MS = 20;
// The gauge is the largest lateness over the current and the previous window: the last 15 to
// 30 s whatever the scrape or push period, and no reader resets what another sees.
const LOOP_DELAY_WINDOW_MS = 15_000;
const MS_PER_S = 1000;
const US_PER_S = 1_000_000;

/** A database pool as far as the process can know it without the driver's private members. */
export interface PoolView {
  /** The pool's application_name. */
  readonly name: string;
  readonly max: number;
  /** Connections held by work now: the API's pool gate slots, the others' transactions in progress. */
  readonly busy?: () => number;
  /** Connections open now, where the pool counts them (db.ts openConnections). */
  readonly open?: () => number;
}

/** Starts the one timer, the event-loop sampler; stop() ends it and the gauges stay. */
export function startRuntimeMetrics(meter: Meter): { stop(): void } {
  const cpu = meter.createObservableCounter("process_cpu_seconds_total", {
    description: "CPU time of this process, user and system, in seconds",
  });
  cpu.addCallback((result) => {
    const usage = process.cpuUsage();
    result.observe((usage.user + usage.system) / US_PER_S);
  });
  const gauge = gaugesOf(meter);
  gauge("process_resident_memory_bytes", "Resident set size of this process, in bytes", () => process.memoryUsage().rss);
  const heap = "JavaScript heap in use (live objects and garbage not yet collected), in bytes";
  gauge("process_heap_used_bytes", heap, () => process.memoryUsage().heapUsed);
  const sampler = startLoopSampler();
  const window = `${LOOP_DELAY_WINDOW_MS / MS_PER_S}-${(2 * LOOP_DELAY_WINDOW_MS) / MS_PER_S} s`;
  const delay = `Largest event-loop delay (timer lateness) seen over the last ${window}, in seconds`;
  gauge("process_event_loop_delay_seconds", delay, () => sampler.maxMs() / MS_PER_S);
  return { stop: () => sampler.stop() };
}

/** db_client_connections_max, and db_client_connections_busy and _open where the process counts them. */
export function observePool(meter: Meter, pool: PoolView): void {
  const gauge = gaugesOf(meter, { "db.client.connection.pool.name": pool.name });
  const max = "Connections the database pool may open (its size); it opens them on demand";
  gauge("db_client_connections_max", max, () => pool.max);
  const open = "Database connections the pool holds open now, idle or busy";
  if (pool.open) gauge("db_client_connections_open", open, pool.open);
  if (pool.busy) {
    const what = "the API: its pool gate's slots in use; the relay and the subscriber: their transactions in progress, "
      + "at most the pool's size";
    gauge("db_client_connections_busy", `Database connections held by work now (${what})`, pool.busy);
  }
}

function gaugesOf(meter: Meter, attributes?: Attributes) {
  return (name: string, description: string, value: () => number): void =>
    meter.createObservableGauge(name, { description }).addCallback((result) => result.observe(value(), attributes));
}

/** Timer lateness, kept as the maximum per window (see LOOP_DELAY_WINDOW_MS). */
export function startLoopSampler(intervalMs = LOOP_SAMPLE_INTERVAL_MS, windowMs = LOOP_DELAY_WINDOW_MS): { maxMs(): number; stop(): void } {
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
