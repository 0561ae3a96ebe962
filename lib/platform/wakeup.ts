// Waking the relay after a charge commits: a NOTIFY in the charge transaction would serialize commits
// on a global lock, so the API notifies on its own, at most once per window plus one trailing notify.
import type { Sql } from "./db.ts";
import { isTransactionPooled } from "./pooler.ts";
import { createMovingRate } from "./moving-rate.ts";

/** The LISTEN/NOTIFY channel the API pokes and the relay listens on. */
export const OUTBOX_CHANNEL = "outbox_pending";

// The latency a trailing notify adds, and a busy API's notify rate (500/s), far below where
// notifying commits start to queue.
export const NOTIFY_WINDOW_MS = 2;
// Past this many commits a second the relay gathers the stream anyway (lib/relay/loop.ts), so the
// window widens, still well inside the relay's 40 ms gather: fewer notifies that wake it for nothing.
const BUSY_STREAM_PER_S = 1000;
const BUSY_NOTIFY_WINDOW_MS = 16;
// The poke rate is a moving figure over about this long, as the relay's gather reads its stream.
const POKE_RATE_WINDOW_MS = 100;

export type OutboxNotifier = ReturnType<typeof createOutboxNotifier>;

/** One notify on the outbox channel (also for ops commands that requeue rows); `sender` is its payload. */
export async function notifyOutbox(sql: Sql, sender = ""): Promise<void> {
  await sql`select pg_notify(${OUTBOX_CHANNEL}, ${sender})`;
}

/** The API-side notifier. A failed notify (`onError`) loses nothing: the relay's poll finds the row. */
export function createOutboxNotifier(
  sql: Sql,
  windowMs: number = NOTIFY_WINDOW_MS,
  onError: (error: unknown) => void = () => {},
  busyWindowMs: number = BUSY_NOTIFY_WINDOW_MS,
  /** The notifies' payload, so that its own listener can tell them from another process's. */
  sender = "",
) {
  let window: ReturnType<typeof setTimeout> | undefined;
  let owed = false;
  let closed = false;
  const inFlight = new Set<Promise<void>>();
  const pokes = createMovingRate(POKE_RATE_WINDOW_MS);
  const nextWindowMs = (): number =>
    pokes.perMs(performance.now()) * 1000 >= BUSY_STREAM_PER_S ? Math.max(windowMs, busyWindowMs) : windowMs;

  const send = (): void => {
    const sent: Promise<void> = notifyOutbox(sql, sender)
      .catch(onError)
      .finally(() => inFlight.delete(sent));
    inFlight.add(sent);
  };
  const notifyNow = (): void => {
    send();
    window = setTimeout(endWindow, nextWindowMs());
  };
  const endWindow = (): void => {
    window = undefined;
    if (owed) notifyNow();
    owed = false;
  };

  return {
    /** Call after a transaction that wrote outbox rows has committed. Never throws. */
    poke(): void {
      if (closed) return;
      pokes.add(1, performance.now());
      if (window !== undefined) {
        owed = true;
        return;
      }
      notifyNow();
    },
    /** Sends the trailing notify if one is owed and waits for the notifies in flight. */
    async close(): Promise<void> {
      closed = true;
      if (window !== undefined) clearTimeout(window);
      window = undefined;
      if (owed) send();
      owed = false;
      await Promise.all([...inFlight]);
    },
  };
}

export type OutboxListener = Awaited<ReturnType<typeof listenForOutbox>>;

// postgres.js re-LISTENs after a reconnect; `onWake` runs on each notify (with its sender) and on
// each (re)connect (without): rows may have committed meanwhile.
export async function listenForOutbox(sql: Sql, onWake: (sender?: string) => void) {
  // Through a transaction pooler LISTEN succeeds and then hears nothing: refused rather than deaf.
  if (isTransactionPooled(sql)) throw new Error("bug: LISTEN through a transaction pooler; use DATABASE_DIRECT_URL's pool");
  const request = await sql.listen(OUTBOX_CHANNEL, (sender) => onWake(sender), () => onWake());
  return { unlisten: (): Promise<void> => request.unlisten() };
}
