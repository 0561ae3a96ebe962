// The options of `bun run chaos:history`: --seed N (the nemesis's schedule and the clients'
// choices; a random one, printed, by default), --duration SECONDS (of load and faults, before
// the heal), --out FILE (the history; a new file under the temp folder by default). A bad
// option stops it with one line.
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface RunOptions {
  readonly seed: number;
  readonly durationMs: number;
  readonly out: string;
}

const DEFAULT_SECONDS = 60;
// Long enough for every fault to come and overlap; longer runs are for the patient.
const MIN_SECONDS = 20;

export function parseArgs(argv: readonly string[]): RunOptions | { error: string } {
  let seed = Math.floor(Math.random() * 2 ** 31);
  let seconds = DEFAULT_SECONDS;
  let out: string | undefined;
  for (let i = 0; i < argv.length; i += 2) {
    const [name, value] = [argv[i], argv[i + 1]];
    if (value === undefined) return { error: `${name} needs a value` };
    if (name === "--seed") {
      if (!/^\d{1,10}$/.test(value) || Number(value) >= 2 ** 32) return { error: "--seed must be an integer from 0 to 4294967295" };
      seed = Number(value);
    } else if (name === "--duration") {
      if (!/^\d+$/.test(value) || Number(value) < MIN_SECONDS) return { error: `--duration must be a whole number of seconds, at least ${MIN_SECONDS}` };
      seconds = Number(value);
    } else if (name === "--out") out = value;
    else return { error: `unknown option ${name} (options: --seed N, --duration SECONDS, --out FILE)` };
  }
  return { seed, durationMs: seconds * 1000, out: out ?? join(tmpdir(), `history-${seed}-${Date.now()}.jsonl`) };
}
