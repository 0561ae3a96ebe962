// http_server_request_duration_seconds (OTel HTTP server conventions), counted in plain integers and
// handed to the SDK at collection: an OTel Histogram's record() hashes its attributes on every call.

export const HTTP_DURATION_METRIC = "http_server_request_duration_seconds";

// Seconds: fine-grained where most answers are, then the default time bounds (2 s lock and pool
// wait, 5 s statement, 10 s request), so a histogram shows which one a slow request ran into.
export const HTTP_DURATION_BUCKETS_S: readonly number[] = [0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10];

/** The route of a request no route matched: one named value keeps every series' labels alike. */
export const UNMATCHED_ROUTE = "(unmatched)";

// The convention's known methods: a client inventing methods cannot create series.
const KNOWN_METHODS: readonly string[] = ["CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"];
export const OTHER_METHOD = "_OTHER";
const METHOD_OF_SLOT = [...KNOWN_METHODS, OTHER_METHOD];
const METHOD_SLOT = new Map(KNOWN_METHODS.map((method, i) => [method, i]));

/** One (method, route, status)'s running totals, with its attributes built once. */
interface HistogramSeries {
  readonly attributes: Readonly<Record<string, string | number>>;
  /** Per bucket of `boundaries`, the last one for values above every bound (not cumulative). */
  readonly counts: number[];
  sum: number;
  count: number;
  min: number;
  max: number;
}

/** What telemetry.ts exports at each collection: a cumulative histogram since `startedAt` (epoch ms). */
export interface HttpServerMetrics {
  readonly name: string;
  readonly description: string;
  readonly boundaries: readonly number[];
  readonly startedAt: number;
  series(): Iterable<HistogramSeries>;
  /** One answered request; `route` is a template or UNMATCHED_ROUTE, never a concrete path. */
  record(method: string, route: string, status: number, seconds: number): void;
}

/** By route, then by method slot, then by status. */
type Table = Map<string, (Map<number, HistogramSeries> | undefined)[]>;

export function createHttpServerMetrics(): HttpServerMetrics {
  const table: Table = new Map();
  const bounds = HTTP_DURATION_BUCKETS_S;
  return {
    name: HTTP_DURATION_METRIC,
    description: "Duration of HTTP server requests, from the request reaching the handler to its response",
    boundaries: bounds,
    startedAt: Date.now(),
    record(method, route, status, seconds) {
      const slot = METHOD_SLOT.get(method) ?? KNOWN_METHODS.length;
      let byMethod = table.get(route);
      if (byMethod === undefined) table.set(route, (byMethod = []));
      let byStatus = byMethod[slot];
      if (byStatus === undefined) byStatus = byMethod[slot] = new Map();
      let series = byStatus.get(status);
      if (series === undefined) byStatus.set(status, (series = newSeries(METHOD_OF_SLOT[slot]!, route, status, bounds.length + 1)));
      // Most requests land in the first few buckets: a scan from the bottom ends early.
      let i = 0;
      while (i < bounds.length && seconds > bounds[i]!) i++;
      series.counts[i]!++;
      series.sum += seconds;
      series.count++;
      if (seconds < series.min) series.min = seconds;
      if (seconds > series.max) series.max = seconds;
    },
    *series() {
      for (const byMethod of table.values()) for (const byStatus of byMethod) if (byStatus !== undefined) yield* byStatus.values();
    },
  };
}

function newSeries(method: string, route: string, status: number, buckets: number): HistogramSeries {
  return {
    attributes: { "http.request.method": method, "http.route": route, "http.response.status_code": status },
    counts: new Array<number>(buckets).fill(0),
    sum: 0,
    count: 0,
    min: Number.POSITIVE_INFINITY,
    max: Number.NEGATIVE_INFINITY,
  };
}
