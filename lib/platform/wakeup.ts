// Waking the relay when a charge commits, without making the charge pay for it.
//
// A NOTIFY inside every charge transaction cuts Postgres's commit rate sharply: notifying
// commits are serialized on a global lock (bench/wakeup-cost.ts measures it). So the API
// does not notify in its transaction: after a charge has committed it calls `poke()`, which
// sends `select pg_notify(...)` as its own statement at most once per short window per
// process: the first poke of a quiet period notifies at once (leading edge); pokes inside
// the window only set a flag, and one trailing notify goes out when the window ends. Every
// commit is thus followed by a notify within `windowMs` (within the busy window past
// BUSY_STREAM_PER_S), and a busy API sends at most 1000/window notifies a second, whatever
// its request rate. The relay LISTENs and drains
// until a claim comes back short, so one notify covers every row committed before it;
// OUTBOX_POLL_MS is only the idle fallback.
import type { Sql } from "./db.ts";
import { isTransactionPooled } from "./pooler.ts";
import { createMovingRate } from "./moving-rate.ts";

/** The LISTEN/NOTIFY channel the API pokes and the relay listens on. */
export const OUTBOX_CHANNEL = "outbox_pending";

// Bounds the extra commit → relay latency a trailing notify adds, and the notify rate of
// a busy API process (500/s), far below the rate at which notifying commits start to queue.
// Short, as at live rates every other event waits up to the window for its notify.
export const NOTIFY_WINDOW_MS = 2;

// A busy stream: past this many events a second the relay stops claiming at every notify and
// gathers the stream for RELAY_GATHER_MS (lib/relay/loop.ts). An API process whose own commits
// pass it widens its window to BUSY_NOTIFY_WINDOW_MS: the relay is gathering anyway (the
// stream is at least this API's rate), and each notify would wake the relay's connection and
// its process for nothing, up to 1000/NOTIFY_WINDOW_MS times a second. Below it (the latency
// case) the window stays NOTIFY_WINDOW_MS.
export const BUSY_STREAM_PER_S = 1000;
// An eighth of the notifies of NOTIFY_WINDOW_MS, so the API, its Postgres and the relay spend
// less per charge; well inside the relay's default gather (40 ms), so a gathering relay waits
// no longer.
export const BUSY_NOTIFY_WINDOW_MS = 16;
// The poke rate is a moving figure over about this long (moving-rate.ts), as the relay's gather
// reads its stream.
const POKE_RATE_WINDOW_MS = 100;

export interface OutboxNotifier {
  /** Call after a transaction that wrote outbox rows has committed. Never throws. */
  poke(): void;
  /** Sends the trailing notify if one is owed and waits for the notifies in flight. */
  close(): Promise<void>;
}

/** One notify on the outbox channel (also for ops commands that requeue rows); `sender` is its payload. */
export async function notifyOutbox(sql: Sql, sender = ""): Promise<void> {
  await sql`select pg_notify(${OUTBOX_CHANNEL}, ${sender})`;
}

/**
 * The API-side notifier. `onError` hears about a failed notify (the database away, say);
 * nothing is lost then: the relay's fallback poll finds the row.
 */
export function createOutboxNotifier(
  sql: Sql,
  windowMs: number = NOTIFY_WINDOW_MS,
  onError: (error: unknown) => void = () => {},
  busyWindowMs: number = BUSY_NOTIFY_WINDOW_MS,
  /** The payload of its notifies, so that its own listener can tell them from another process's. */
  sender = "",
): OutboxNotifier {
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
  const endWindow = (): void => {
    window = undefined;
    if (!owed) return;
    owed = false;
    send();
    window = setTimeout(endWindow, nextWindowMs());
  };

  return {
    poke() {
      if (closed) return;
      pokes.add(1, performance.now());
      if (window !== undefined) {
        owed = true;
        return;
      }
      send();
      window = setTimeout(endWindow, nextWindowMs());
    },
    async close() {
      closed = true;
      if (window !== undefined) clearTimeout(window);
      window = undefined;
      if (owed) send();
      owed = false;
      await Promise.all([...inFlight]);
    },
  };
}

export interface OutboxListener {
  unlisten(): Promise<void>;
}

/**
 * LISTENs on the outbox channel, on a pool whose connections are Postgres sessions of their
 * own (not behind a transaction pooler). postgres.js keeps the listening connection open and
 * re-LISTENs after a reconnect; `onWake` runs on each notify (with its sender) and on each
 * (re)connect (without), since rows may have committed while the connection was down.
 */
export async function listenForOutbox(sql: Sql, onWake: (sender?: string) => void): Promise<OutboxListener> {
  // Through a transaction pooler LISTEN succeeds and then hears nothing: its registration stays
  // on a server connection other clients use. Refused rather than silently deaf.
  if (isTransactionPooled(sql)) throw new Error("bug: LISTEN through a transaction pooler; use DATABASE_DIRECT_URL's pool");
  const request = await sql.listen(OUTBOX_CHANNEL, (sender) => onWake(sender), () => onWake());
  return { unlisten: () => request.unlisten() };
}
