// charges-outbox/client: the API's TypeScript client. Fetch and Web Crypto only, so it runs on
// Bun, Deno, Node 20+, workerd and browsers. docs/client.md says what each answer means.
export { ChargesClient } from "./client.ts";
export type { CaptureBody, Charge, ChargeBody, ChargeEvent, ChargeView, ChargesClientOptions, CallOptions, CreateOptions, Created, IncrementAuthorizationBody, KeyState, Refund, RefundBody } from "./client.ts";
export { ChargesApiError, CLIENT_PROBLEM, PROBLEM, type ProblemType } from "./errors.ts";
export { MemoryKeyStore, type IntentRecord, type KeyStore } from "./key-store.ts";
export { RetryBudget } from "./budget.ts";
export { backoffMs, parseRetryAfter, isRetriedStatus, shouldRetry, type BackoffOptions, type RetryBudgetOptions } from "./policy.ts";
export type { FetchLike, TryReport } from "./send.ts";
export type { components, paths, operations } from "./openapi.d.ts";
