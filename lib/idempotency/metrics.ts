// idempotency_resumed_total: keys whose holder was gone, taken over by a request with the same
// key or by the completer. Labels: the endpoint and who resumed, never a key.
import { metrics, type Meter } from "@opentelemetry/api";

export function resumedCounter(by: "request" | "completer", meter: Meter = metrics.getMeter("charges")) {
  const counter = meter.createCounter("idempotency_resumed_total", {
    description: "STARTED keys whose lease had expired, taken over and driven on from their recovery point, by endpoint and by whom",
  });
  return (endpoint: string) => counter.add(1, { endpoint, by });
}
