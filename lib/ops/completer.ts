// The completer job's run (lib/idempotency/completer.ts does each round): with a processor,
// STARTED keys with an expired lease driven final; in either mode, parked keys counted.
import type { Config } from "../platform/config.ts";
import type { Sql } from "../platform/db.ts";
import { completeRound, parkedCount, type CompleterOptions, type CompleterRound } from "../idempotency/completer.ts";
import { leaseMsFor } from "../idempotency/drive.ts";
import { resumedCounter } from "../idempotency/metrics.ts";
import { withJobLock, type Locked } from "../platform/job-lock.ts";
import { createProcessorClient } from "../charges/processor.ts";
import { foreignOperations } from "../charges/index.ts";

// Keys claimed per round, driven COMPLETER_PARALLEL at a time; a run goes on while rounds come
// back full, up to COMPLETER_ROUNDS, so an outage's backlog drains over a few runs while one run
// stays short and the relay's other jobs do not wait long behind it.
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
  readonly round: CompleterRound | undefined;
  readonly parkedNow: number;
}

/**
 * One run under the job's lock. Without a processor the count still runs, so a switch back to
 * PAYMENT_PROCESSOR=none keeps the operator's view of the keys it left parked.
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
