// The engine's view of the service an operation's steps call (a payment processor): every call
// answered as a value, so that the steps can record what is known and resume from it.

/** Why nobody knows what the processor did. */
export type UnknownCause = "processor_error" | "unreachable" | "timeout" | "processing";

export type CallResult<T> =
  | { readonly kind: "ok"; readonly value: T }
  /** A final answer of the processor: a decline, or a request it will never accept. */
  | { readonly kind: "refused"; readonly status: number; readonly code: string; readonly declineCode: string | null; readonly message: string }
  /**
   * The processor may or may not have acted. finished: the API itself answered a 5xx it keeps under
   * the key (not Stripe-Should-Retry), so whatever it did is in its objects now.
   */
  | { readonly kind: "unknown"; readonly cause: UnknownCause; readonly detail: string; readonly status: number | null; readonly finished: boolean };

/** One call of the client `Api`, as a value; each operation builds its steps' calls from it. */
export interface ForeignAdapter<Api> {
  call<T>(method: "GET" | "POST", request: (api: Api) => Promise<T>): Promise<CallResult<T>>;
}

/** A call's value mapped, its refusal or unknown outcome kept. */
export async function mapCall<T, V>(call: Promise<CallResult<T>>, view: (value: T) => V): Promise<CallResult<V>> {
  const result = await call;
  return result.kind === "ok" ? { kind: "ok", value: view(result.value) } : result;
}

/** An adapter as the engine holds it: handed to the operations, read here by nothing. */
export type HeldAdapter = object;
