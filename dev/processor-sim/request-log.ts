// The calls the simulator has seen, newest last, for tests that wait until a call is seen
// (in flight, hung, answered) instead of sleeping.
import type { SimRequestEntry } from "./types.ts";

// Enough for any test or chaos scenario to look back on; dev mode runs for hours.
const KEPT_ENTRIES = 1000;

export class RequestLog {
  private entries: SimRequestEntry[] = [];

  add(entry: SimRequestEntry): SimRequestEntry {
    this.entries.push(entry);
    if (this.entries.length > KEPT_ENTRIES) this.entries = this.entries.slice(-KEPT_ENTRIES);
    return entry;
  }

  list(): SimRequestEntry[] {
    return this.entries.map((entry) => ({ ...entry }));
  }
}
