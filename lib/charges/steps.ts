// What operations' steps share: the attempt numbers of their processor keys, an unknown
// outcome's next attempt, and the ids in a stored response.
import type { CallResult } from "./processor.ts";
import type { StepResult } from "../idempotency/model.ts";

/** The attempt suffix of a call's idempotency key: 0 until the processor stored a 5xx under it. */
export function attemptOf(value: number | undefined): number {
  return value ?? 0;
}

/**
 * An unknown outcome of a call that is harmless to repeat under another key (an unconfirmed
 * payment; a confirmation, applied once per payment). A processor that answered (a 5xx) stored
 * that answer under the key and would replay it, so the next try takes the next attempt; with
 * no answer the key is kept, since what the processor stored under it, if anything, is the truth.
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
