// The nemesis: runs the schedule's windows, each fault's in turn (start at its time, heal at
// its end), all faults at once, and records each window as it begins and once it is healed.
// A heal that cannot happen yet (a process that will not start while Postgres is down) is
// tried again until it does.
import { sleep } from "../../testkit/wait.ts";
import type { Recorder } from "./recorder.ts";
import { FAULTS, type Fault, type Window } from "./schedule.ts";

export interface FaultAction {
  start(): Promise<void>;
  heal(): Promise<void>;
}

// A heal is tried this often, for at most this long (then the run goes on, and says so).
const HEAL_RETRY_MS = 500;
const HEAL_GIVE_UP_MS = 90_000;

/** Runs `windows` from `t0` (epoch ms); resolves once every window is healed. */
export async function runNemesis(windows: readonly Window[], actions: Record<Fault, FaultAction>, t0: number, recorder: Recorder): Promise<void> {
  await Promise.all(FAULTS.map((f) => oneFault(windows.filter((w) => w.f === f), f, actions[f], t0, recorder)));
}

async function oneFault(windows: readonly Window[], f: Fault, action: FaultAction, t0: number, recorder: Recorder): Promise<void> {
  for (const w of windows) {
    await sleep(Math.max(0, t0 + w.at - Date.now()));
    recorder.add({ type: "nemesis", f, phase: "start", time: Date.now() });
    await action.start().catch((error: unknown) => console.log(`nemesis: ${f} did not start: ${String(error)}`));
    await sleep(Math.max(0, t0 + w.at + w.ms - Date.now()));
    await healed(f, action);
    recorder.add({ type: "nemesis", f, phase: "stop", time: Date.now() });
  }
}

async function healed(f: Fault, action: FaultAction): Promise<void> {
  const until = Date.now() + HEAL_GIVE_UP_MS;
  for (;;) {
    try {
      return await action.heal();
    } catch (error) {
      if (Date.now() > until) return console.log(`nemesis: ${f} could not be healed: ${String(error)}`);
      await sleep(HEAL_RETRY_MS);
    }
  }
}
