// What operations' steps share: the attempt numbers of their processor keys, an unknown
// outcome's next attempt, and the ids in a stored response.
import type { CallResult } from "./processor.ts";
import type { StepResult } from "../idempotency/model.ts";

/** The attempt suffix of a call's idempotency key: 0 until the processor stored a 5xx under it. */
export function attemptOf(value: number | undefined): number {
  return value ?? 0;
}

/**
 * An unknown outcome of a call whose effect, should it have happened, is harmless to repeat
 * under another key (a payment created and never confirmed; a confirmation, which the
 * processor applies once per payment). When the processor answered (a 5xx), it stored that
 * answer under the key and would replay it: the next try uses the next attempt. When no
 * answer came, the key is kept: what the processor stored under it, if anything, is the truth.
 */
export function unknownAfter<R extends Readonly<Record<string, unknown>>>(call: Extract<CallResult<unknown>, { kind: "unknown" }>, resume: R, attemptName: keyof R & string): StepResult<R> {
  const current = resume[attemptName];
  const next = call.status !== null && call.status >= 500 ? { ...resume, [attemptName]: (typeof current === "number" ? current : 0) + 1 } : resume;
  return { kind: "unknown", cause: call.cause, detail: call.detail, resume: next };
}

/** A string member of a stored response body (the ids its Location is built from). */
export function idOf(body: string, member: string): string {
  const parsed: unknown = JSON.parse(body);
  const value = typeof parsed === "object" && parsed !== null ? (parsed as Record<string, unknown>)[member] : undefined;
  if (typeof value === "string") return value;
  throw new Error(`bug: a stored response has no ${member}`);
}
