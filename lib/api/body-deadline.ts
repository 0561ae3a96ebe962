// When a request's body must have arrived (API_BODY_TIMEOUT_MS from its arrival), kept beside the
// Request and raced where the body is read (body.ts): past it the answer is a 408 and the
// request's place in flight is freed, where a body that never comes would hold it until Bun's
// idle timeout closes the socket without an answer.
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
