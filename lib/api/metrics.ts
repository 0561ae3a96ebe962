// The API's metrics through the OpenTelemetry API only; the entrypoint registers the SDK.
// Labels hold the endpoint and the outcome, never a key or an id.
import { metrics, type Attributes, type Meter } from "@opentelemetry/api";
import { OUTCOME_KINDS, type OutcomeKind } from "../idempotency/outcome.ts";
import { AUTH_FAILURE_REASONS, type AuthFailureReason } from "./auth.ts";
import type { StatementStats } from "../idempotency/group-commit.ts";
import { observePool, type PoolView } from "../platform/runtime-metrics.ts";

export type ApiMetrics = ReturnType<typeof createApiMetrics>;

type Tally = { readonly attributes: Attributes; count: number };

/** Series whose labels are known up front start at 0: dashboards show 0, rate() alerts work at once. */
export function createApiMetrics(meter: Meter = metrics.getMeter("charges"), endpoints: readonly string[] = []) {
  // Counted here, reported at collection: a synchronous counter's add() would hash its labels on every POST.
  const requests = meter.createObservableCounter("idempotency_requests_total", {
    description: "POST requests with an Idempotency-Key, by endpoint and outcome",
  });
  const tallies = new Map<string, Map<string, Tally>>();
  requests.addCallback((result) => {
    for (const byOutcome of tallies.values()) for (const tally of byOutcome.values()) result.observe(tally.count, tally.attributes);
  });
  const authFailures = meter.createCounter("auth_failures_total", {
    description: "Requests to /charges refused for their bearer token (or left unverified: keys_unavailable), by reason",
  });
  for (const reason of AUTH_FAILURE_REASONS) authFailures.add(0, { reason });
  for (const endpoint of endpoints) {
    tallies.set(endpoint, new Map(OUTCOME_KINDS.map((outcome) => [outcome, { attributes: { endpoint, outcome }, count: 0 }])));
  }
  return {
    observeStatements(stats: StatementStats): void {
      meter
        .createObservableCounter("api_charge_statements_total", { description: "Statements of the idempotent operations sent; requests_total over this is the mean batch size" })
        .addCallback((result) => result.observe(stats.statements));
      meter
        .createObservableCounter("api_charge_statement_requests_total", { description: "Requests of the idempotent operations those statements answered (several per batch)" })
        .addCallback((result) => result.observe(stats.requests));
      meter
        .createObservableGauge("api_charge_requests_queued", { description: "Requests waiting for a running statement to end (API_CHARGE_STATEMENTS)" })
        .addCallback((result) => result.observe(stats.queued));
    },
    observePool(pool: PoolView): void {
      observePool(meter, pool);
    },
    countOutcome(endpoint: string, outcome: OutcomeKind): void {
      let byOutcome = tallies.get(endpoint);
      if (byOutcome === undefined) tallies.set(endpoint, (byOutcome = new Map()));
      const tally = byOutcome.get(outcome);
      if (tally !== undefined) tally.count++;
      else byOutcome.set(outcome, { attributes: { endpoint, outcome }, count: 1 });
    },
    countAuthFailure(reason: AuthFailureReason): void {
      authFailures.add(1, { reason });
    },
    observeInFlight(read: () => number): void {
      meter
        .createObservableGauge("api_requests_in_flight", { description: "/charges requests holding a place in flight now (API_MAX_IN_FLIGHT): from the token's check to the answer's leaving" })
        .addCallback((result) => result.observe(read()));
    },
  };
}

type Rendered = { readonly at: number; readonly status: number; readonly headers: [string, string][]; readonly body: string };

/** GET /metrics rendered at most once per `maxAgeMs`: a flood of scrapes would take the event loop. */
export function cachedExposition(render: () => Promise<Response>, maxAgeMs: number, now: () => number = performance.now.bind(performance)): () => Promise<Response> {
  let last: Rendered | undefined;
  let rendering: Promise<Rendered> | undefined;
  return async () => {
    if (last === undefined || now() - last.at >= maxAgeMs) {
      rendering ??= render()
        .then(async (res) => ({ at: now(), status: res.status, headers: [...res.headers], body: await res.text() }))
        .finally(() => (rendering = undefined));
      last = await rendering;
    }
    return new Response(last.body, { status: last.status, headers: last.headers });
  };
}
