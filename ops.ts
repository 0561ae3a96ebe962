// `bun run ops <job>`: run one operations job now and print its result as one JSON line.
//   key-retention | stale-keys | reconcile | outbox-retention | outbox-gauges | inbox-retention
//   | completer | parked
// and the operator's commands, the console's twins (lib/ops/cli.ts): find, show, list, export,
// audit, backlog, and the audited actions requeue <id|all>, resolve <id> [succeeded <processor
// id> | refused <code>], discard, release and apply (over a filtered list), each with --reason.
// A job another process is running right now is not run twice: it prints {"skipped":true}.
import { userInfo } from "node:os";
import { configOrExit } from "./lib/platform/config.ts";
import { createSql, describeDbError } from "./lib/platform/db.ts";
import { databaseModeLine } from "./lib/platform/pooler.ts";
import { exitOnStartupError, openDatabase } from "./lib/platform/startup.ts";
import { createLogger, silentLogger } from "./lib/platform/log.ts";
import { useKeyHashSecret } from "./lib/platform/redact.ts";
import { JOB_NAMES, newGauges, runJob, type JobName } from "./lib/ops/jobs.ts";
import { listParked } from "./lib/ops/lists.ts";
import { leaseMsFor } from "./lib/idempotency/drive.ts";
import { createProcessorClient } from "./lib/charges/processor.ts";
import { runInboxRetention } from "./lib/subscriber/inbox-retention.ts";
import { act, type ActionResult } from "./lib/ops/actions.ts";
import { COMMANDS_USAGE, isCommand, parseArgs, resolutionArg, runCommand } from "./lib/ops/cli.ts";

// The reference subscriber's job: its own process runs it too.
const INBOX_RETENTION = "inbox-retention";
const USAGE = `usage: bun run ops <${[...JOB_NAMES, INBOX_RETENTION, "parked"].join("|")}> | bun run ops requeue <outbox-id|all> [--reason R] | bun run ops resolve <id> [succeeded <processor id> | refused <code>] [--reason R]\n  ${COMMANDS_USAGE}`;
// How many parked keys `bun run ops parked` prints.
const PARKED_LIST_LIMIT = 100;
// requeue and resolve ran before actions had reasons: without --reason their audit row says so.
const NO_REASON = "no reason given (bun run ops without --reason)";

function usageExit(message: string): never {
  console.error(`${message}; ${USAGE.split("\n")[0]} (bun run ops help lists every command)`);
  process.exit(2);
}

const parsed = parseArgs(process.argv.slice(2));
if (typeof parsed === "string") usageExit(parsed);
const [job, arg, verdict, detail] = parsed.words;
if (job === "help") {
  console.log(USAGE);
  process.exit(0);
}
const isJob = (name: string | undefined): name is JobName => JOB_NAMES.some((j) => j === name);
if (job !== "requeue" && job !== INBOX_RETENTION && job !== "parked" && job !== "resolve" && !isJob(job) && !isCommand(job)) {
  usageExit(job ? `unknown job "${job}"` : "no job named");
}
if (job === "requeue" && !arg) usageExit(`requeue needs an outbox row id or "all"`);
if (job === "resolve" && !arg) usageExit("resolve needs the id of the parked key's charge or refund");
const resolution = job === "resolve" ? resolutionArg(verdict, detail) : undefined;
if (typeof resolution === "string") usageExit(resolution);
const reason = parsed.flags.get("reason") ?? NO_REASON;
const actor = { name: process.env.OPS_ACTOR?.trim() || userInfo().username, via: "cli" as const };

const config = configOrExit(process.env);
const sql = await openDatabase(config.databaseUrl, { max: 2, applicationName: "charges-ops", pooler: config.databasePooler }).catch(exitOnStartupError("ops"));
const log = createLogger(config.logLevel, "ops", console.error);
// Keys are printed by keyHash: with the deployment's secret they match the API's logs. The
// plain jobs print no hash, so a missing secret is worth a line only for the operator's commands.
useKeyHashSecret(config.keyHashSecret, job !== "stale-keys" && (isJob(job) || job === INBOX_RETENTION) ? silentLogger : log);
// The jobs' locks: session locks past the pooler when it is given (lib/platform/job-lock.ts).
const jobsSql = config.databaseDirectUrl === undefined ? sql : createSql(config.databaseDirectUrl, { max: 1, applicationName: "charges-ops-direct" });
const database = databaseModeLine(config, { locks: "job locks" });
log.info(database.msg, database.fields);
const needsProcessor = job === "resolve" || job === "apply";
const ctx = {
  sql,
  log,
  processor: needsProcessor && config.processor.mode !== "none" ? createProcessorClient(config.processor) : undefined,
  leaseMs: leaseMsFor(config.processor.timeoutMs),
};

/** requeue's and resolve's printed shapes, as before they were audited. */
function legacyShape(result: ActionResult): Record<string, unknown> {
  if (result.action === "requeue") return { job: "requeue", target: result.target, requeued: result.done ? result.detail.rows : 0 };
  return result.done ? { job: "resolve", target: result.target, resolved: true, ...result.detail } : { job: "resolve", target: result.target, resolved: false, reason: result.reason };
}

try {
  if (job === INBOX_RETENTION) {
    console.log(JSON.stringify(await runInboxRetention(jobsSql, config.subscriberInboxRetentionSeconds, log)));
  } else if (job === "requeue" || job === "resolve") {
    if (job === "resolve" && resolution?.kind === "retry" && ctx.processor === undefined) usageExit("resolve without an outcome drives the key at the processor: set PAYMENT_PROCESSOR");
    console.log(JSON.stringify(legacyShape(await act(ctx, { action: job, target: arg!, reason, actor, resolution }))));
  } else if (job === "parked") {
    console.log(JSON.stringify({ job, keys: await listParked(sql, PARKED_LIST_LIMIT) }));
  } else if (isCommand(job)) {
    const output = await runCommand(ctx, actor, job, { words: parsed.words.slice(1), flags: parsed.flags });
    if (output.kind === "usage") usageExit(output.message);
    if (output.kind === "text") process.stdout.write(output.value);
    else console.log(JSON.stringify(output.value));
  } else {
    const result = await runJob(job as JobName, jobsSql, config, newGauges(), log);
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
