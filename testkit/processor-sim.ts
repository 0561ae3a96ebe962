// The payment-processor simulator for tests, chaos and the bench, with the real `stripe`
// package pointed at it the way the API points it at any Stripe-speaking processor.
import Stripe from "stripe";
import type { ProcessorSim } from "../dev/processor-sim/index.ts";

export { startProcessorSim, type ProcessorSim } from "../dev/processor-sim/index.ts";

// Any well-formed test-mode key is accepted by the simulator.
export const SIM_KEY = "sk_test_processor_sim";
// Long enough for a loaded 2-core machine; tests that want a client timeout set their own.
const CLIENT_TIMEOUT_MS = 10_000;

export interface SimClientOptions {
  readonly key?: string;
  readonly timeoutMs?: number;
  /** Aborting it ends the calls in flight, as a caller that gives up does. */
  readonly signal?: AbortSignal;
}

/** A Stripe client on the simulator: no retries of its own beyond the package's built-in resend of a closed connection. */
export function stripeFor(sim: ProcessorSim, options: SimClientOptions = {}): Stripe {
  const signal = options.signal;
  const fetchFn: typeof fetch = Object.assign(
    (input: Parameters<typeof fetch>[0], init?: RequestInit) => {
      if (!signal) return fetch(input, init);
      const signals = init?.signal ? [init.signal, signal] : [signal];
      return fetch(input, { ...init, signal: AbortSignal.any(signals) });
    },
    { preconnect: fetch.preconnect },
  );
  return new Stripe(options.key ?? SIM_KEY, {
    host: new URL(sim.url).hostname,
    port: sim.port,
    protocol: "http",
    maxNetworkRetries: 0,
    httpClient: Stripe.createFetchHttpClient(fetchFn),
    timeout: options.timeoutMs ?? CLIENT_TIMEOUT_MS,
  });
}

/**
 * A header of the response behind a result or an error. With the fetch HTTP client the
 * package's `lastResponse` is the fetch Response, whose `headers` is a Headers object (its
 * typing says a plain object, which it is only with the Node client and on errors).
 */
export function responseHeader(headers: unknown, name: string): string | undefined {
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  if (typeof headers !== "object" || headers === null) return undefined;
  const value = (headers as Record<string, unknown>)[name.toLowerCase()];
  return typeof value === "string" ? value : undefined;
}
