// The one error every failed call throws: the API's problem (RFC 9457) when there was an
// answer, or one of the client's own problem types when there was none to give.

/** The client's own problem types, for failures no server answer describes (docs/client.md). */
export const CLIENT_PROBLEM = {
  /** The caller's deadline passed before a final answer. */
  deadline: "urn:charges-outbox:client:deadline-exceeded",
  /** The caller's AbortSignal fired. */
  aborted: "urn:charges-outbox:client:aborted",
  /** The client's retry budget had no token left for another try. */
  budget: "urn:charges-outbox:client:retry-budget-exhausted",
  /** An answer that is not the API's: not JSON, or not the documented shape. */
  unexpected: "urn:charges-outbox:client:unexpected-response",
  /** The key store holds this intent with another body. */
  intentConflict: "urn:charges-outbox:client:intent-body-conflict",
} as const;

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
