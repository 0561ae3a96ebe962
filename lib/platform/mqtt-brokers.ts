// The brokers of MQTT_URL, in the order given, and the one in use. Every connection a process
// opens (the relay's several, the subscriber's one) goes to the broker in use; when a
// connection to it is lost, or an attempt to reach it fails, the next connection goes to the
// next broker of the list, round and round. The first connection to notice moves the process
// on, once: the others, whose loss was the same one, find it moved already. A broker that was
// lost and comes back is used again when the list comes round to it.
import { maskUrl } from "./redact.ts";

/** A move away from a broker whose connection was lost, with both URLs masked. */
export interface BrokerMove {
  readonly from: string;
  readonly to: string;
}

export class BrokerList {
  readonly urls: readonly string[];
  private index = 0;
  private readonly listeners = new Set<(move: BrokerMove) => void>();

  constructor(urls: string | readonly string[]) {
    this.urls = typeof urls === "string" ? [urls] : [...urls];
    if (this.urls.length === 0) throw new Error("bug: a broker list needs at least one URL");
  }

  /** The broker in use: where the next connection goes. */
  get current(): { readonly index: number; readonly url: string } {
    return { index: this.index, url: this.urls[this.index] as string };
  }

  /** The broker in use, its password masked (for /readyz and log lines). */
  get inUse(): string {
    return maskUrl(this.current.url);
  }

  /**
   * A connection to the broker at `index` ended: lost after its CONNACK (`lost`), or an attempt
   * that never got one. The process moves to the next broker, unless it has moved already. A
   * move after a loss is told to the listeners; one after a failed attempt is not (its cause
   * is reported once by the connection, and a list of brokers all down would otherwise log a
   * move per retry).
   */
  leave(index: number, lost: boolean): void {
    if (index !== this.index || this.urls.length === 1) return;
    const from = this.inUse;
    this.index = (index + 1) % this.urls.length;
    if (!lost) return;
    const move = { from, to: this.inUse };
    for (const listener of this.listeners) listener(move);
  }

  /** Hears each move away from a lost broker; returns an unsubscribe. */
  onMove(listener: (move: BrokerMove) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

/** What the processes take: one URL, a list (MQTT_URL parsed), or a list already shared by several connections. */
export type Brokers = string | readonly string[] | BrokerList;

export function brokerList(brokers: Brokers): BrokerList {
  return brokers instanceof BrokerList ? brokers : new BrokerList(brokers);
}
