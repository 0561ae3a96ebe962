// What the processor's steps share: reading what phase 1 and earlier steps recorded, the
// attempt numbers of their idempotency keys.
import type { Resume, StepResult } from "../foreign/types.ts";
import type { CallResult } from "./client.ts";

/** A string phase 1 or a step recorded; its absence is a bug in the declaration. */
export function field(resume: Resume, name: string): string {
  const value = resume[name];
  if (typeof value !== "string") throw new Error(`bug: the key's resume has no ${name}`);
  return value;
}

export function numberField(resume: Resume, name: string): number {
  const value = resume[name];
  if (typeof value !== "number") throw new Error(`bug: the key's resume has no ${name}`);
  return value;
}

/** The attempt suffix of a call's idempotency key: 0 until the processor stored a 5xx under it. */
export function attemptOf(resume: Resume, name: string): number {
  const value = resume[name];
  return typeof value === "number" ? value : 0;
}

/**
 * An unknown outcome of a call whose effect, should it have happened, is harmless to repeat
 * under another key (a payment created and never confirmed; a confirmation, which the
 * processor applies once per payment). When the processor answered (a 5xx), it stored that
 * answer under the key and would replay it: the next try uses the next attempt. When no
 * answer came, the key is kept: what the processor stored under it, if anything, is the truth.
 */
export function unknownAfter(call: Extract<CallResult<unknown>, { kind: "unknown" }>, resume: Resume, attemptName: string): StepResult {
  const next = call.status !== null && call.status >= 500 ? { ...resume, [attemptName]: attemptOf(resume, attemptName) + 1 } : resume;
  return { kind: "unknown", cause: call.cause, detail: call.detail, resume: next };
}
