// `bun run ops <job>`: run one operations job now and print its result as one JSON line.
//   key-retention | stale-keys | reconcile | outbox-retention | outbox-gauges | inbox-retention
//   | requeue <id|all> | completer | parked | resolve <id> [succeeded <processor id> | refused <code>]
// A job another process is running right now is not run twice: it prints {"skipped":true}.
import { configOrExit } from "./lib/platform/config.ts";
import { createSql, describeDbError } from "./lib/platform/db.ts";
import { databaseModeLine } from "./lib/platform/pooler.ts";
import { exitOnStartupError, openDatabase } from "./lib/platform/startup.ts";
import { createLogger, silentLogger } from "./lib/platform/log.ts";
import { useKeyHashSecret } from "./lib/platform/redact.ts";
import { JOB_NAMES, newGauges, runJob, type JobName } from "./lib/ops/jobs.ts";
import { requeue } from "./lib/ops/sql.ts";
import { listParked, resolveKey, type Resolution } from "./lib/ops/parked.ts";
import { leaseMsFor } from "./lib/idempotency/drive.ts";
import { createProcessorClient } from "./lib/charges/processor.ts";
import { runInboxRetention } from "./lib/subscriber/inbox-retention.ts";
import { notifyOutbox } from "./lib/platform/wakeup.ts";

// The reference subscriber's job: its own process runs it too.
const INBOX_RETENTION = "inbox-retention";
const USAGE = `usage: bun run ops <${[...JOB_NAMES, INBOX_RETENTION, "parked"].join("|")}> | bun run ops requeue <outbox-id|all> | bun run ops resolve <id> [succeeded <processor id> | refused <code>]`;
// How many parked keys `bun run ops parked` prints.
const PARKED_LIST_LIMIT = 100;

const [job, arg, verdict, detail] = process.argv.slice(2);
const isJob = (name: string | undefined): name is JobName => JOB_NAMES.some((j) => j === name);
if (job !== "requeue" && job !== INBOX_RETENTION && job !== "parked" && job !== "resolve" && !isJob(job)) {
  console.error(job ? `unknown job "${job}"; ${USAGE}` : USAGE);
  process.exit(2);
}
if (job === "requeue" && !arg) {
  console.error(`requeue needs an outbox row id or "all"; ${USAGE}`);
  process.exit(2);
}
const resolution = job === "resolve" ? resolutionOf(arg, verdict, detail) : undefined;

function resolutionOf(id: string | undefined, how: string | undefined, value: string | undefined): Resolution {
  if (!id) return usageExit("resolve needs the id of the parked key's charge or refund");
  if (how === undefined) return { kind: "retry" };
  if ((how === "succeeded" || how === "refused") && value) return how === "succeeded" ? { kind: how, processorId: value } : { kind: how, code: value };
  return usageExit(`resolve's outcome must be "succeeded <processor id>" or "refused <code>", got "${how}${value ? ` ${value}` : ""}"`);
}

function usageExit(message: string): never {
  console.error(`${message}; ${USAGE}`);
  process.exit(2);
}

const config = configOrExit(process.env);
const sql = await openDatabase(config.databaseUrl, { max: 2, applicationName: "charges-ops", pooler: config.databasePooler }).catch(exitOnStartupError("ops"));
const log = createLogger(config.logLevel, "ops", console.error);
// stale-keys and parked print keys by keyHash: with the deployment's secret they match the API's
// logs. The other jobs print no hash, so a missing secret is worth a line only for those two.
useKeyHashSecret(config.keyHashSecret, job === "stale-keys" || job === "parked" ? log : silentLogger);
// The jobs' locks: session locks past the pooler when it is given (lib/platform/job-lock.ts).
const jobsSql = config.databaseDirectUrl === undefined ? sql : createSql(config.databaseDirectUrl, { max: 1, applicationName: "charges-ops-direct" });
const database = databaseModeLine(config, { locks: "job locks" });
log.info(database.msg, database.fields);
try {
  if (job === INBOX_RETENTION) {
    console.log(JSON.stringify(await runInboxRetention(jobsSql, config.subscriberInboxRetentionSeconds, log)));
  } else if (job === "requeue") {
    const requeued = await requeue(sql, arg!);
    if (requeued > 0) await notifyOutbox(sql);
    console.log(JSON.stringify({ job, target: arg, requeued }));
  } else if (job === "parked") {
    console.log(JSON.stringify({ job, keys: await listParked(sql, PARKED_LIST_LIMIT) }));
  } else if (job === "resolve") {
    if (resolution!.kind === "retry" && config.processor.mode === "none") usageExit("resolve without an outcome drives the key at the processor: set PAYMENT_PROCESSOR");
    const processor = config.processor.mode === "none" ? undefined : createProcessorClient(config.processor);
    const result = await resolveKey(sql, arg!, resolution!, processor, leaseMsFor(config.processor.timeoutMs));
    if (result.resolved) await notifyOutbox(sql);
    console.log(JSON.stringify({ job, target: arg, ...result }));
  } else {
    const result = await runJob(job, jobsSql, config, newGauges(), log);
    console.log(JSON.stringify(result));
  }
  await sql.end({ timeout: 5 });
  if (jobsSql !== sql) await jobsSql.end({ timeout: 5 });
} catch (error) {
  console.error(`ops ${job} failed: ${describeDbError(error)}`);
  await sql.end({ timeout: 1 }).catch(() => {});
  if (jobsSql !== sql) await jobsSql.end({ timeout: 1 }).catch(() => {});
  process.exit(1);
}
