// The payment processor's adapter: Stripe's v1 API through Stripe's official package, each call
// answered as a value (the object, a final refusal, or an unknown outcome).
import { context, metrics, SpanKind, trace } from "@opentelemetry/api";
import Stripe from "stripe";
import type { ProcessorConfig } from "../platform/config-processor.ts";
import { endSpan, hashedKey, tracer, tracingOn } from "../platform/trace-context.ts";
import type { CallResult, ForeignAdapter } from "../idempotency/model.ts";

export { mapCall, type CallResult } from "../idempotency/model.ts";

export type ProcessorAdapter = ForeignAdapter<Stripe>;

// Stripe's own retries are off: a retry is ours, under our keys and lease. Its fetch client serves
// every runtime this API runs on.
export function createProcessorClient(config: ProcessorConfig): ProcessorAdapter {
  if (config.key === undefined) throw new Error("bug: a processor client without PAYMENT_PROCESSOR_KEY");
  const target = new URL(config.url);
  const protocol = target.protocol === "http:" ? "http" : "https";
  const stripe = new Stripe(config.key.reveal(), {
    host: target.hostname,
    port: target.port || (protocol === "http" ? 80 : 443),
    protocol,
    maxNetworkRetries: 0,
    timeout: config.timeoutMs,
    httpClient: Stripe.createFetchHttpClient(),
    // Under load its telemetry buffer fills and it writes a line to stderr per dropped message.
    telemetry: false,
  });
  const duration = metrics.getMeter("charges").createHistogram("http_client_request_duration_seconds", {
    description: "Calls to the payment processor, by method and answer (or error_type when none came)",
    unit: "s",
    advice: { explicitBucketBoundaries: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60] },
  });
  stripe.on("request", (event: Stripe.RequestEvent) => {
    // Runs in the call's async context, so the active span is the call's own (traced below).
    if (!tracingOn()) return;
    trace.getActiveSpan()?.setAttributes({
      "url.full": `${protocol}://${target.host}${event.path}`,
      ...(event.idempotency_key && { "charges.processor.idempotency_key_hash": hashedKey(event.idempotency_key) }),
    });
  });
  const send = <T>(request: (api: Stripe) => Promise<T>) => request(stripe).then((value): CallResult<T> => ({ kind: "ok", value }), classify);
  return {
    async call<T>(method: "GET" | "POST", request: (api: Stripe) => Promise<T>): Promise<CallResult<T>> {
      const started = performance.now();
      const result = tracingOn() ? await traced(method, target, () => send(request)) : await send(request);
      const attributes: Record<string, string | number> = { http_request_method: method, server_address: target.hostname };
      if (result.kind === "ok") attributes.http_response_status_code = 200;
      else if (result.status === null) attributes.error_type = result.kind === "unknown" ? result.cause : "refused";
      else attributes.http_response_status_code = result.status;
      duration.record((performance.now() - started) / 1000, attributes);
      return result;
    },
  };
}

async function traced<T>(method: string, target: URL, send: () => Promise<CallResult<T>>): Promise<CallResult<T>> {
  const span = tracer().startSpan(method, {
    kind: SpanKind.CLIENT,
    attributes: { "http.request.method": method, "server.address": target.hostname },
  });
  const result = await context.with(trace.setSpan(context.active(), span), send);
  if (result.kind === "ok") span.setAttribute("http.response.status_code", 200);
  else if (result.status !== null) span.setAttribute("http.response.status_code", result.status);
  endSpan(span, result.kind === "ok" ? undefined : result.kind === "unknown" ? result.cause : String(result.status));
  return result;
}

// By class and status, never text: a 5xx, 409, 429 or no answer is unknown (the processor may have
// acted); any other 4xx (a 402 card error: a decline) is a final refusal.
function classify(error: unknown): CallResult<never> {
  if (!(error instanceof Stripe.errors.StripeError)) throw error;
  if (error instanceof Stripe.errors.StripeConnectionError) {
    const detail = error.detail as { code?: string } | undefined;
    const timeout = detail?.code === "ETIMEDOUT";
    return { kind: "unknown", cause: timeout ? "timeout" : "unreachable", detail: timeout ? "no answer within the time bound" : "no connection, or it closed before an answer", status: null, finished: false };
  }
  const status = error.statusCode ?? 500;
  // 409: the processor is still working on this key; 429: it asks us to come back later.
  if (status >= 500 || status === 409 || status === 429) {
    return { kind: "unknown", cause: "processor_error", detail: `the processor answered ${status}${error.code ? ` (${error.code})` : ""}`, status, finished: keptAnswer(error) };
  }
  return { kind: "refused", status, code: error.code ?? error.rawType ?? "refused", declineCode: error.decline_code ?? null, message: error.message };
}

// A 5xx Stripe keeps under the key: a JSON error the package parsed (a gateway's page leaves
// statusCode unset), without Stripe-Should-Retry: true (the API's word that the call did not run).
function keptAnswer(error: InstanceType<typeof Stripe.errors.StripeError>): boolean {
  if (error.statusCode === undefined || error.statusCode < 500 || typeof error.rawType !== "string") return false;
  return error.headers?.["stripe-should-retry"] !== "true";
}
