// The brokers of MQTT_URL and the one in use by every connection of a process; a loss or a failed
// attempt moves it to the next, round and round, once: the first connection to notice moves it.
import { maskUrl } from "./redact.ts";

/** A move away from a broker whose connection was lost, with both URLs masked. */
export interface BrokerMove {
  readonly from: string;
  readonly to: string;
}

export class BrokerList {
  readonly urls: readonly string[];
  #index = 0;
  private readonly listeners = new Set<(move: BrokerMove) => void>();

  constructor(urls: string | readonly string[]) {
    this.urls = typeof urls === "string" ? [urls] : [...urls];
    if (this.urls.length === 0) throw new Error("bug: a broker list needs at least one URL");
  }

  /** The broker in use: where the next connection goes. */
  get index(): number {
    return this.#index;
  }

  /** The broker in use, its password masked (for /readyz and log lines). */
  get inUse(): string {
    return maskUrl(this.urls[this.#index] as string);
  }

  // A connection to the broker at `index` ended, `lost` after its CONNACK or an attempt that got none.
  // Only a move after a loss is told: with every broker down, one per retry would flood the log.
  leave(index: number, lost: boolean): void {
    if (index !== this.#index || this.urls.length === 1) return;
    const from = this.inUse;
    this.#index = (index + 1) % this.urls.length;
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

/** One URL, MQTT_URL's list, or a list already shared by several connections. */
export type Brokers = string | readonly string[] | BrokerList;

export function brokerList(brokers: Brokers): BrokerList {
  return brokers instanceof BrokerList ? brokers : new BrokerList(brokers);
}
