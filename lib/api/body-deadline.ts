// The body's deadline (API_BODY_TIMEOUT_MS from arrival), raced where it is read: past it a 408
// frees the place in flight that a body never sent would hold until Bun's idle timeout.
import { ProblemError } from "./problem.ts";

const deadlines = new WeakMap<Request, number>();

/** The body of `request` must have arrived by `at` (performance.now() time). */
export function setBodyDeadline(request: Request, at: number): void {
  deadlines.set(request, at);
}

/** `reading`, or a 408 ProblemError once the request's body deadline has passed first. */
export function arriving<T>(request: Request, reading: Promise<T>): Promise<T> {
  const at = deadlines.get(request);
  if (at === undefined) return reading;
  // One promise and one timer a read; what the read does after a timeout is no one's to hear.
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(bodyTimeout()), Math.max(0, at - performance.now()));
    reading.then(
      (value) => (clearTimeout(timer), resolve(value)),
      (error: unknown) => (clearTimeout(timer), reject(error)),
    );
  });
}

function bodyTimeout(): ProblemError {
  return new ProblemError("bodyTimeout", "the request body did not arrive in time (API_BODY_TIMEOUT_MS)");
}
