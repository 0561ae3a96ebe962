// The engine's view of the other service an operation's steps call (a payment processor):
// every call answered as a value, the object, a final refusal or an unknown outcome, so that
// phase 2 can record what is known and resume from it.

/** Why nobody knows what the processor did: its 5xx, no connection, no answer in time, or an object it is still processing. */
export type UnknownCause = "processor_error" | "unreachable" | "timeout" | "processing";

export type CallResult<T> =
  | { readonly kind: "ok"; readonly value: T }
  /** A final answer of the processor: a decline, or a request it will never accept. */
  | { readonly kind: "refused"; readonly status: number; readonly code: string; readonly declineCode: string | null; readonly message: string }
  /**
   * The processor may or may not have acted: resolved later by reading its objects. status: its
   * answer, null when none came. finished: the processor's API answered the call itself with a
   * 5xx that Stripe keeps under the key (a JSON error, not Stripe-Should-Retry: true), so the
   * call has ended: whatever it did is in the processor's objects now, and the key will only
   * ever answer the same. Not so for no answer, a 409 (the key still in flight), a 429, or a
   * 5xx that is not the API's (a gateway's page): the call may still be running.
   */
  | { readonly kind: "unknown"; readonly cause: UnknownCause; readonly detail: string; readonly status: number | null; readonly finished: boolean };

/**
 * The other service as operations see it: one call of its API, answered as a value. Each
 * operation builds the calls its steps make from it (its `capabilities`), so no adapter
 * lists every operation's methods. `Api` is the service's client (Stripe's, for payments).
 */
export interface ForeignAdapter<Api> {
  call<T>(method: "GET" | "POST", request: (api: Api) => Promise<T>): Promise<CallResult<T>>;
}

/** A call's value mapped, its refusal or unknown outcome kept. */
export async function mapCall<T, V>(call: Promise<CallResult<T>>, view: (value: T) => V): Promise<CallResult<V>> {
  const result = await call;
  return result.kind === "ok" ? { kind: "ok", value: view(result.value) } : result;
}

/** An adapter as the engine holds it: it hands it to the operation that builds its calls, and reads nothing of it. */
export type HeldAdapter = object;
