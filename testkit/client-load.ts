// Many charge intents at once through the project's client, each timed and recorded with its
// key, its answer or its error, and its tries: what test/client-lossy.test.ts and
// test/client-budget.test.ts assert on, and what bench/client-budget.ts reports.
import { ChargesApiError, type ChargesClient } from "charges-outbox/client";
import { createServer, type Server } from "node:net";

export type IntentEnd =
  | { readonly ok: true; readonly key: string; readonly chargeId: string; readonly body: unknown; readonly replayed: boolean; readonly attempts: number; readonly ms: number }
  | { readonly ok: false; readonly error: ChargesApiError; readonly ms: number };

export interface IntentsRun {
  readonly ends: readonly IntentEnd[];
  /** The client's tries, as each call's onTry saw them. */
  readonly tries: number;
  readonly retries: number;
}

/**
 * `count` charge intents at once, amounts 1000 + i, each with `deadlineMs`. A throw that is not
 * a ChargesApiError (of `errors`: another checkout's client throws its own) is a bug: rethrown.
 */
export async function chargeIntents(client: ChargesClient, count: number, deadlineMs: number, errors: typeof ChargesApiError = ChargesApiError): Promise<IntentsRun> {
  let tries = 0;
  let retries = 0;
  const onTry = (t: { attempt: number }): void => {
    tries += 1;
    if (t.attempt > 1) retries += 1;
  };
  const one = async (i: number): Promise<IntentEnd> => {
    const started = performance.now();
    try {
      const a = await client.charges.create({ amountCents: 1000 + i }, { deadlineMs, onTry });
      return { ok: true, key: a.idempotencyKey, chargeId: a.charge.id, body: a.charge, replayed: a.replayed, attempts: a.attempts, ms: performance.now() - started };
    } catch (error) {
      if (!(error instanceof errors)) throw error;
      return { ok: false, error, ms: performance.now() - started };
    }
  };
  const ends = await Promise.all(Array.from({ length: count }, (_, i) => one(i)));
  return { ends, tries, retries };
}

/** The value at quantile q (0..1) of `values`, nearest rank. */
export function quantile(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? Number.NaN;
}

/** A server that accepts every connection and closes it at once (a crashing backend behind a port); counts them. */
export async function startConnectionDropper(): Promise<{ port: number; readonly accepted: () => number; close(): Promise<void> }> {
  let accepted = 0;
  const server: Server = createServer((socket) => {
    accepted += 1;
    socket.on("error", () => {});
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as { port: number }).port,
    accepted: () => accepted,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** A port nothing listens on: bound once, then closed, so a connection to it is refused. */
export async function refusingPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
