// The completer job's run (lib/idempotency/completer.ts does each round): in stripe mode,
// rounds of STARTED keys with an expired lease driven to their final state; in either mode,
// the parked keys counted. jobs.ts turns the result into the gauge, the log lines and the
// job's printed result.
import type { Config } from "../platform/config.ts";
import type { Sql } from "../platform/db.ts";
import { completeRound, parkedCount, type CompleterOptions, type CompleterRound } from "../idempotency/completer.ts";
import { leaseMsFor } from "../idempotency/drive.ts";
import { resumedCounter } from "../idempotency/metrics.ts";
import { withJobLock, type Locked } from "../platform/job-lock.ts";
import { createProcessorClient } from "../charges/processor.ts";
import { foreignOperations } from "../charges/index.ts";

// Keys the completer claims per round, driven COMPLETER_PARALLEL at a time (a few processor
// calls each); a run goes on while rounds come back full, up to COMPLETER_ROUNDS, so a
// backlog left by an outage drains at a few hundred keys a run while a run lasts seconds and
// the relay's other jobs wait no longer than that.
const COMPLETER_BATCH = 50;
const COMPLETER_PARALLEL = 8;
const COMPLETER_ROUNDS = 5;

// One client per process and configuration, made on the completer's first run (nothing at import).
const optionsByConfig = new WeakMap<Config, Omit<CompleterOptions, "lockId">>();

function optionsOf(config: Config): Omit<CompleterOptions, "lockId"> {
  let options = optionsByConfig.get(config);
  if (options === undefined) {
    options = {
      batch: COMPLETER_BATCH,
      parallel: COMPLETER_PARALLEL,
      resolveWindowSeconds: config.processor.resolveWindowSeconds,
      operations: foreignOperations(),
      processor: createProcessorClient(config.processor),
      leaseMs: leaseMsFor(config.processor.timeoutMs),
      onResumed: resumedCounter("completer"),
    };
    optionsByConfig.set(config, options);
  }
  return options;
}

export interface CompleterRun {
  /** Undefined without a processor: nothing to drive. */
  readonly round: CompleterRound | undefined;
  readonly parkedNow: number;
}

/**
 * One run under the job's lock (`ran: false` when another process holds it). Without a
 * processor the count still runs, so that a switch back to PAYMENT_PROCESSOR=none keeps the
 * operator's view of the keys it left parked.
 */
export async function completerRun(sql: Sql, config: Config, lockId: bigint): Promise<Locked<CompleterRun>> {
  if (config.processor.mode === "none") {
    const counted = await withJobLock(sql, lockId, (conn) => parkedCount(conn));
    return counted.ran ? { ran: true, value: { round: undefined, parkedNow: counted.value } } : counted;
  }
  const options = { ...optionsOf(config), lockId };
  const first = await completeRound(sql, options);
  if (first === undefined) return { ran: false };
  let round = first;
  for (let rounds = 1, last = first; rounds < COMPLETER_ROUNDS && last.claimed === COMPLETER_BATCH; rounds++) {
    const next = await completeRound(sql, options);
    if (next === undefined) break;
    round = { claimed: round.claimed + next.claimed, finished: round.finished + next.finished, unknown: round.unknown + next.unknown, lost: round.lost + next.lost, parked: round.parked + next.parked };
    last = next;
  }
  return { ran: true, value: { round, parkedNow: await parkedCount(sql) } };
}
