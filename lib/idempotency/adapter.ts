// The engine's view of the service an operation's steps call (a payment processor): every call
// answered as a value, so that the steps can record what is known and resume from it.

/** Why nobody knows what the processor did: its 5xx, no connection, no answer in time, or an object it is still processing. */
export type UnknownCause = "processor_error" | "unreachable" | "timeout" | "processing";

export type CallResult<T> =
  | { readonly kind: "ok"; readonly value: T }
  /** A final answer of the processor: a decline, or a request it will never accept. */
  | { readonly kind: "refused"; readonly status: number; readonly code: string; readonly declineCode: string | null; readonly message: string }
  /**
   * The processor may or may not have acted: resolved later by reading its objects. status:
   * null when no answer came. finished: the API itself answered a 5xx that Stripe keeps under
   * the key (a JSON error, not Stripe-Should-Retry: true), so the call has ended and whatever it
   * did is in the processor's objects now; not so for no answer, a 409, a 429 or a gateway's page.
   */
  | { readonly kind: "unknown"; readonly cause: UnknownCause; readonly detail: string; readonly status: number | null; readonly finished: boolean };

/**
 * The service as operations see it: one call of its client `Api`, answered as a value. Each
 * operation builds its steps' calls from it (its `capabilities`), so no adapter lists them all.
 */
export interface ForeignAdapter<Api> {
  call<T>(method: "GET" | "POST", request: (api: Api) => Promise<T>): Promise<CallResult<T>>;
}

/** A call's value mapped, its refusal or unknown outcome kept. */
export async function mapCall<T, V>(call: Promise<CallResult<T>>, view: (value: T) => V): Promise<CallResult<V>> {
  const result = await call;
  return result.kind === "ok" ? { kind: "ok", value: view(result.value) } : result;
}

/** An adapter as the engine holds it: handed to the operations, read by nothing here. */
export type HeldAdapter = object;
