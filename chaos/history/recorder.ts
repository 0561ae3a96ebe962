// The history as the run writes it: records appended in memory and flushed to the file as the
// run goes (so a run that dies still leaves what it saw), one JSON object a line, times in
// epoch milliseconds.
import { appendFileSync, writeFileSync } from "node:fs";
import type { HistoryRecord } from "./history.ts";

export class Recorder {
  #pending: string[] = [];
  #count = 0;

  constructor(readonly file: string) {
    writeFileSync(file, "");
  }

  get count(): number {
    return this.#count;
  }

  add(record: HistoryRecord): void {
    this.#pending.push(JSON.stringify(record));
    this.#count += 1;
  }

  flush(): void {
    if (this.#pending.length === 0) return;
    appendFileSync(this.file, `${this.#pending.join("\n")}\n`);
    this.#pending = [];
  }
}
