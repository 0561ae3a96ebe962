// The API's metrics through the OpenTelemetry API only; the entrypoint registers the SDK.
// Labels hold the endpoint and the outcome, never a key or an id.
import { metrics, type Meter } from "@opentelemetry/api";
import type { ChargeOutcome } from "./charges.ts";
import type { AuthFailureReason } from "./auth.ts";

export interface ApiMetrics {
  countOutcome(endpoint: string, outcome: ChargeOutcome["kind"]): void;
  /** A /charges request refused before the charge service saw it: no idempotency outcome. */
  countAuthFailure(reason: AuthFailureReason): void;
}

export function createApiMetrics(meter: Meter = metrics.getMeter("charges")): ApiMetrics {
  const requests = meter.createCounter("idempotency_requests_total", {
    description: "POST requests with an Idempotency-Key, by endpoint and outcome",
  });
  const authFailures = meter.createCounter("auth_failures_total", {
    description: "Requests to /charges refused for their bearer token (or left unverified: keys_unavailable), by reason",
  });
  return {
    countOutcome(endpoint, outcome) {
      requests.add(1, { endpoint, outcome });
    },
    countAuthFailure(reason) {
      authFailures.add(1, { reason });
    },
  };
}
