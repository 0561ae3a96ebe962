// The API's metrics through the OpenTelemetry API only; the entrypoint registers the SDK.
// Labels hold the endpoint and the outcome, never a key or an id.
import { metrics, type Meter } from "@opentelemetry/api";
import type { ChargeOutcome } from "./charges.ts";

export interface ApiMetrics {
  countOutcome(endpoint: string, outcome: ChargeOutcome["kind"]): void;
}

export function createApiMetrics(meter: Meter = metrics.getMeter("charges")): ApiMetrics {
  const requests = meter.createCounter("idempotency_requests_total", {
    description: "POST requests with an Idempotency-Key, by endpoint and outcome",
  });
  return {
    countOutcome(endpoint, outcome) {
      requests.add(1, { endpoint, outcome });
    },
  };
}
