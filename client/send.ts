// One call's tries: the same method, URL, key and bytes each time, a per-try timeout, waits
// from Retry-After or the back-off, and the three limits (deadline, AbortSignal, the client's
// retry budget). Answers the first final HTTP answer; throws ChargesApiError when none came.
import { CLIENT_PROBLEM, ChargesApiError } from "./errors.ts";
import type { RetryBudget } from "./budget.ts";
import { backoffMs, parseRetryAfter, shouldRetry, type BackoffOptions } from "./policy.ts";

/** An HTTP answer, read whole while its try's timeout still ran. */
export interface Exchange {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
}

/** What the caller sees of each try (ChargesClientOptions.onTry / CallOptions.onTry). */
export interface TryReport {
  /** 1 for the first try. */
  readonly attempt: number;
  readonly idempotencyKey: string | undefined;
  /** "answer" (with its status), "network" (no answer: refused, reset, closed) or "timeout" (the per-try timeout). */
  readonly outcome: "answer" | "network" | "timeout";
  /** The HTTP status, 0 without an answer. */
  readonly status: number;
  /** Whether the answer was a replay of the one stored under the key (Idempotent-Replayed: true). */
  readonly replayed: boolean;
}

/** The part of fetch the client uses: any runtime's fetch, or a wrapper of it, fits. */
export type FetchLike = (url: string, init: RequestInit) => Promise<Response>;

export interface Transport {
  readonly fetch: FetchLike;
  /** The bearer token of a try, undefined for none; it throws (at once, unretried) when the caller's option is wrong. */
  readonly token: () => Promise<string | undefined>;
  readonly perTryTimeoutMs: number;
  readonly backoff: BackoffOptions;
  readonly budget: RetryBudget;
  readonly random: () => number;
  readonly onTry?: (report: TryReport) => void;
}

export interface Plan {
  readonly method: "GET" | "POST";
  readonly url: string;
  readonly headers: Readonly<Record<string, string>>;
  /** Serialized once by the caller; every try sends these bytes. */
  readonly body?: Uint8Array<ArrayBuffer>;
  readonly idempotencyKey?: string;
}

export interface Limits {
  /** Epoch ms after which no try starts and no wait begins. */
  readonly deadline: number;
  readonly signal?: AbortSignal;
  readonly onTry?: (report: TryReport) => void;
}

type Outcome = { readonly kind: "answer"; readonly exchange: Exchange } | { readonly kind: "network" | "timeout"; readonly error: unknown };

/** Tries `plan` until a final answer; that answer and the number of tries. */
export async function send(t: Transport, plan: Plan, limits: Limits): Promise<{ exchange: Exchange; attempts: number }> {
  if (limits.signal?.aborted) throw giveUp("aborted", { kind: "network", error: limits.signal.reason }, plan, 0);
  let tryPlan = plan;
  for (let attempt = 1; ; attempt += 1) {
    const outcome = await tryOnce(t, tryPlan, limits);
    const report: TryReport = {
      attempt,
      idempotencyKey: plan.idempotencyKey,
      outcome: outcome.kind,
      status: outcome.kind === "answer" ? outcome.exchange.status : 0,
      replayed: outcome.kind === "answer" && outcome.exchange.headers.get("idempotent-replayed") === "true",
    };
    t.onTry?.(report);
    limits.onTry?.(report);
    if (outcome.kind === "answer" && isFinal(outcome.exchange)) {
      // The server took a request and answered it for good: it is up, whatever the network loses.
      if (outcome.exchange.status < 500) t.budget.succeeded();
      return { exchange: outcome.exchange, attempts: attempt };
    }
    const wait = waitBefore(t, outcome, attempt);
    const stop = stopReason(limits, wait);
    if (stop) throw giveUp(stop, outcome, plan, attempt);
    await pause(wait, limits.signal);
    if (limits.signal?.aborted) throw giveUp("aborted", outcome, plan, attempt);
    // No token until something succeeds (or the floor makes one): the retry waits, up to the deadline.
    if (!(await t.budget.acquire(limits.deadline, limits.signal))) throw giveUp(limits.signal?.aborted ? "aborted" : "budget", outcome, plan, attempt);
    if (outcome.kind === "answer" && outcome.exchange.status === IN_FLIGHT) tryPlan = waitingPlan(t, plan, limits);
  }
}

/** A final answer: its status is not retried, or the server said so (Should-Retry). */
function isFinal(exchange: Exchange): boolean {
  return !shouldRetry(exchange.status, exchange.headers.get("should-retry"));
}

const IN_FLIGHT = 409;
// How long a try after a 409 asks the API to hold it for the key's holder (Prefer: wait, RFC
// 7240): the API caps it by its request timeout (10 s by default), the client here by its own
// per-try timeout and deadline, keeping a second for the answer to come back.
const PREFER_WAIT_S = 8;
const ANSWER_MARGIN_MS = 1000;

/** `plan` with Prefer: wait=N for the tries after a 409, N within this try's bounds; `plan` itself when none is left. */
function waitingPlan(t: Transport, plan: Plan, limits: Limits): Plan {
  const roomMs = Math.min(t.perTryTimeoutMs, limits.deadline - Date.now()) - ANSWER_MARGIN_MS;
  const seconds = Math.min(PREFER_WAIT_S, Math.floor(roomMs / 1000));
  return seconds > 0 ? { ...plan, headers: { ...plan.headers, prefer: `wait=${seconds}` } } : plan;
}

function waitBefore(t: Transport, outcome: Outcome, attempt: number): number {
  const asked = outcome.kind === "answer" ? parseRetryAfter(outcome.exchange.headers.get("retry-after"), Date.now()) : undefined;
  return asked ?? backoffMs(attempt, t.backoff, t.random());
}

type Stop = "aborted" | "deadline" | "budget";

/** Why no further try is sent, if none is, before the wait (the budget is asked after it). */
function stopReason(limits: Limits, waitMs: number): Stop | undefined {
  if (limits.signal?.aborted) return "aborted";
  if (Date.now() + waitMs >= limits.deadline) return "deadline";
  return undefined;
}

// A retry that waited for the budget until its deadline ends as any deadline does: retryable.
const STOP_TYPE = { aborted: CLIENT_PROBLEM.aborted, deadline: CLIENT_PROBLEM.deadline, budget: CLIENT_PROBLEM.deadline } as const;
const STOP_TEXT = {
  aborted: "the caller aborted",
  deadline: "the deadline came first",
  budget: "the deadline came while the retry waited for the client's retry budget (nothing succeeded meanwhile)",
} as const;

/**
 * The error of a call that ends without a final answer: the last answer's problem when there
 * was one (a 503 stays a 503), else the reason the tries stopped. Always retryable: the
 * same key may still succeed later.
 */
function giveUp(stop: Stop, last: Outcome, plan: Plan, attempts: number): ChargesApiError {
  if (stop !== "aborted" && last.kind === "answer") return problemError(last.exchange, plan.idempotencyKey, attempts, true);
  const why = last.kind === "answer" ? `the last try answered ${last.exchange.status}` : `the last try got no answer (${last.kind}: ${describe(last.error)})`;
  return new ChargesApiError({
    type: STOP_TYPE[stop],
    status: 0,
    detail: `${STOP_TEXT[stop]} after ${attempts} ${attempts === 1 ? "try" : "tries"}; ${why}`,
    idempotencyKey: plan.idempotencyKey,
    retryable: true,
    attempts,
    cause: last.kind === "answer" ? undefined : last.error,
  });
}

/** A ChargesApiError from an HTTP answer: its problem body, or about:blank when it has none. */
export function problemError(exchange: Exchange, idempotencyKey: string | undefined, attempts: number, retryable: boolean): ChargesApiError {
  const problem = parseObject(exchange.text);
  const text = (name: string): string | undefined => (typeof problem?.[name] === "string" ? (problem[name] as string) : undefined);
  return new ChargesApiError({
    type: text("type") ?? "about:blank",
    status: exchange.status,
    title: text("title"),
    detail: text("detail") ?? `HTTP ${exchange.status}`,
    idempotencyKey,
    retryable,
    attempts,
    problem,
  });
}

export function parseObject(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

async function tryOnce(t: Transport, plan: Plan, limits: Limits): Promise<Outcome> {
  // Outside the try below: a token option that fails is the caller's bug, not the network's.
  const token = await t.token();
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort();
  }, Math.max(0, Math.min(t.perTryTimeoutMs, limits.deadline - Date.now())));
  const onAbort = (): void => controller.abort(limits.signal?.reason);
  limits.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    if (limits.signal?.aborted) throw limits.signal.reason;
    const headers = token === undefined ? plan.headers : { ...plan.headers, authorization: `Bearer ${token}` };
    const response = await t.fetch(plan.url, { method: plan.method, headers, body: plan.body, signal: controller.signal });
    const text = await response.text();
    return { kind: "answer", exchange: { status: response.status, headers: response.headers, text } };
  } catch (error) {
    return { kind: timedOut ? "timeout" : "network", error };
  } finally {
    clearTimeout(timer);
    limits.signal?.removeEventListener("abort", onAbort);
  }
}

/** Waits `ms`, or less when the signal fires (the loop then stops on it). */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
