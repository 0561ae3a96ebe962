// The one error every failed call throws: the API's problem (RFC 9457) when there was an
// answer, or one of the client's own problem types when there was none to give.

/** The client's own problem types, for failures no server answer describes (docs/client.md). */
export const CLIENT_PROBLEM = {
  /** The caller's deadline passed before a final answer. */
  deadline: "urn:charges-outbox:client:deadline-exceeded",
  /** The caller's AbortSignal fired. */
  aborted: "urn:charges-outbox:client:aborted",
  /** An answer that is not the API's: not JSON, or not the documented shape. */
  unexpected: "urn:charges-outbox:client:unexpected-response",
  /** The key store holds this intent with another body. */
  intentConflict: "urn:charges-outbox:client:intent-body-conflict",
} as const;

const API = "https://charges.example/problems/";

/**
 * The API's problem types (docs/api.md), under the API's own names (lib/api/problem.ts):
 * compare `error.type === PROBLEM.cardDeclined`, not URI strings. test/client-types.test.ts
 * fails when the API's table and this one differ.
 */
export const PROBLEM = {
  invalidKey: `${API}invalid-idempotency-key`,
  invalidBody: `${API}invalid-body`,
  invalidId: `${API}invalid-id`,
  /** 400: a query parameter (`after` of charges.events) is not valid. */
  invalidQuery: `${API}invalid-query`,
  /** 400: a `Prefer: wait` whose value is not whole seconds (the client sends only whole seconds). */
  invalidPrefer: `${API}invalid-prefer`,
  unauthorized: `${API}unauthorized`,
  notFound: `${API}not-found`,
  /** 409: the same key is in flight; retried. */
  inFlight: `${API}request-in-flight`,
  /** 409: the key's recovery data is unreadable; parked until an operator resolves it (docs/operations.md). */
  keyParked: `${API}idempotency-key-parked`,
  /** 410: the key's stored answer expired and its tombstone lives; nothing was done, `location` names the original resource. Final. */
  keyExpired: `${API}idempotency-key-expired`,
  bodyTooLarge: `${API}body-too-large`,
  /** 408: the body did not arrive in time; nothing was done. */
  bodyTimeout: `${API}body-timeout`,
  unsupportedMediaType: `${API}unsupported-media-type`,
  /** 422: the key was used with another request. */
  payloadConflict: `${API}idempotency-key-reused`,
  refundExceedsCharge: `${API}refund-exceeds-charge`,
  chargeNotRefundable: `${API}charge-not-refundable`,
  /** 422 of charges.capture: the charge is not authorized (captured, canceled, failed, or captured at once). */
  chargeNotCapturable: `${API}charge-not-capturable`,
  /** 422 of charges.capture: more than the authorized amount. */
  captureExceedsAuthorized: `${API}capture-exceeds-authorized`,
  /** 422 of charges.capture, stored under the key: final. */
  captureRefused: `${API}capture-refused`,
  /** 422 of charges.cancel: the charge is not authorized. */
  chargeNotCancelable: `${API}charge-not-cancelable`,
  /** 422 of charges.cancel, stored under the key: final. */
  cancelRefused: `${API}cancel-refused`,
  /** 422 of charges.incrementAuthorization: the charge is not authorized. */
  chargeNotIncrementable: `${API}charge-not-incrementable`,
  /** 422 of charges.incrementAuthorization: the new total is not more than the charge's amount. */
  incrementNotGreater: `${API}increment-not-greater`,
  /** 422 of charges.incrementAuthorization, stored under the key: final (the processor will not raise this payment). */
  incrementRefused: `${API}increment-refused`,
  /** 402, stored under the key: final. */
  cardDeclined: `${API}card-declined`,
  /** 422, stored under the key: final. */
  refundRefused: `${API}refund-refused`,
  /** 502, 503, 504: the processor's outcome is unknown; retried with the same key. */
  processorError: `${API}processor-error`,
  processorUnavailable: `${API}processor-unavailable`,
  processorTimeout: `${API}processor-timeout`,
  /** 500: unknown outcome; retried with the same key. */
  internal: `${API}internal-error`,
  /** 503: the API cannot serve now (its database); retried. */
  unavailable: `${API}service-unavailable`,
  /** 429: the tenant is past the API's rate limit; retried after its Retry-After. */
  rateLimited: `${API}rate-limited`,
  /** 503: the API has too many requests in flight; retried after its Retry-After. */
  overloaded: `${API}overloaded`,
} as const;

/** Every problem type the client names: the API's and its own. */
export type ProblemType = (typeof PROBLEM)[keyof typeof PROBLEM] | (typeof CLIENT_PROBLEM)[keyof typeof CLIENT_PROBLEM];

export interface ChargesApiErrorInit {
  readonly type: string;
  /** The HTTP status, or 0 when no answer came (network error, timeout, abort). */
  readonly status: number;
  readonly title?: string;
  readonly detail: string;
  /** The key every try carried; undefined for a call that has none (a GET). */
  readonly idempotencyKey?: string;
  readonly retryable: boolean;
  /** Tries sent. */
  readonly attempts: number;
  /** The problem body as the API sent it, when it sent one. */
  readonly problem?: Readonly<Record<string, unknown>>;
  readonly cause?: unknown;
}

export class ChargesApiError extends Error {
  readonly type: string;
  readonly status: number;
  readonly title: string | undefined;
  readonly detail: string;
  readonly idempotencyKey: string | undefined;
  /** Whether another try with the same key may still succeed (later, or with a longer deadline). */
  readonly retryable: boolean;
  readonly attempts: number;
  readonly problem: Readonly<Record<string, unknown>> | undefined;

  constructor(init: ChargesApiErrorInit) {
    super(`${init.status || "no answer"}: ${init.detail}`, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = "ChargesApiError";
    this.type = init.type;
    this.status = init.status;
    this.title = init.title;
    this.detail = init.detail;
    this.idempotencyKey = init.idempotencyKey;
    this.retryable = init.retryable;
    this.attempts = init.attempts;
    this.problem = init.problem;
  }
}
