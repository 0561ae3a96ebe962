// `bun run ops`: the console's twins (find, show, list, export, audit, backlog, and the actions).
// Each prints one JSON line (export: CSV); actions are audited as the console's.
import { chargeLife, findCharges } from "./life.ts";
import { isListKind, listNeeds, toCsv, LIST_KINDS, type ListFilter, type Page } from "./lists.ts";
import { backlog } from "./sql.ts";
import type { Resolution } from "../idempotency/completer.ts";
import { act, actOnList, isAction, listAudit, LIST_ACTIONS, MAX_LIST_ACTION, type Actor, type OpsContext } from "./actions.ts";

const COMMANDS = ["find", "show", "list", "export", "audit", "backlog", "discard", "release", "apply"] as const;
type Command = (typeof COMMANDS)[number];
export const isCommand = (value: string | undefined): value is Command => COMMANDS.some((c) => c === value);

export const COMMANDS_USAGE = [
  "bun run ops find <key | charge id | refund id | event id | pi_… | re_…> [--tenant T]",
  "bun run ops show <charge id>",
  `bun run ops list|export <${LIST_KINDS.join("|")}> [--tenant T] [--operation OP] [--older-than SECONDS] [--limit N] [--offset N]`,
  "bun run ops audit [--limit N] [--offset N]",
  "bun run ops backlog",
  "bun run ops discard <outbox id> --reason R | bun run ops release <aggregate id> --reason R",
  "bun run ops apply <requeue|discard|resolve|release> <list> [filters] --reason R [--yes COUNT]",
].join("\n  ");

type Parsed = { readonly words: readonly string[]; readonly flags: ReadonlyMap<string, string> };

const VALUE_FLAGS = new Set(["tenant", "operation", "older-than", "limit", "offset", "reason", "yes"]);

/** A flag without its value, or an unknown one, is a usage error (the message). */
export function parseArgs(args: readonly string[]): Parsed | string {
  const words: string[] = [];
  const flags = new Map<string, string>();
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (!arg.startsWith("--")) words.push(arg);
    else if (!VALUE_FLAGS.has(arg.slice(2))) return `unknown option ${arg}`;
    else if (args[i + 1] === undefined) return `${arg} needs a value`;
    else flags.set(arg.slice(2), args[++i]!);
  }
  return { words, flags };
}

const count = (raw: string | undefined, fallback: number): number | undefined => {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
};

function filterOf(flags: ReadonlyMap<string, string>): ListFilter | string {
  const age = count(flags.get("older-than"), 0);
  if (age === undefined) return `--older-than must be a whole number of seconds, got "${flags.get("older-than")}"`;
  return { tenant: flags.get("tenant"), operation: flags.get("operation"), olderThanSeconds: age };
}

function pageOf(flags: ReadonlyMap<string, string>, defaultLimit: number): Page | undefined {
  const limit = count(flags.get("limit"), defaultLimit);
  const offset = count(flags.get("offset"), 0);
  return limit === undefined || offset === undefined ? undefined : { limit, offset };
}

const BAD_PAGE = "--limit and --offset must be whole numbers";

export type Output = { readonly kind: "json"; readonly value: unknown } | { readonly kind: "text"; readonly value: string } | { readonly kind: "usage"; readonly message: string };

const json = (value: unknown): Output => ({ kind: "json", value });
const usage = (message: string): Output => ({ kind: "usage", message });

export async function runCommand(ctx: OpsContext, actor: Actor, command: Command, parsed: Parsed): Promise<Output> {
  const [first, second] = parsed.words;
  const { flags } = parsed;
  switch (command) {
    case "find":
      return first ? json({ job: command, found: await findCharges(ctx.sql, { text: first, tenant: flags.get("tenant") }) }) : usage("find needs what to look for");
    case "show": {
      if (!first) return usage("show needs a charge id");
      const life = await chargeLife(ctx.sql, first);
      return json(life === undefined ? { job: command, found: false } : { job: command, found: true, ...life });
    }
    case "list":
    case "export": {
      if (!isListKind(first)) return usage(`${command} needs a list: ${LIST_KINDS.join(", ")}`);
      const filter = filterOf(flags);
      const page = pageOf(flags, command === "export" ? 10_000 : 100);
      if (typeof filter === "string") return usage(filter);
      if (page === undefined) return usage(BAD_PAGE);
      const result = await listNeeds(ctx.sql, first, filter, page);
      return command === "export" ? { kind: "text", value: toCsv(result.rows) } : json({ job: command, list: first, total: result.total, rows: result.rows });
    }
    case "audit": {
      const page = pageOf(flags, 50);
      return page ? json({ job: command, ...(await listAudit(ctx.sql, page.limit, page.offset)) }) : usage(BAD_PAGE);
    }
    case "backlog":
      return json({ job: command, ...(await backlog(ctx.sql)) });
    case "discard":
    case "release": {
      if (!first) return usage(`${command} needs ${command === "discard" ? "a parked outbox row's id" : "an aggregate's id"}`);
      const reason = flags.get("reason");
      if (!reason?.trim()) return usage(`${command} needs --reason`);
      return json({ job: command, ...(await act(ctx, { action: command, target: first, reason, actor })) });
    }
    case "apply":
      return apply(ctx, actor, first, second, flags);
  }
}

async function apply(ctx: OpsContext, actor: Actor, action: string | undefined, list: string | undefined, flags: ReadonlyMap<string, string>): Promise<Output> {
  if (!isAction(action) || !isListKind(list)) return usage("apply needs an action and a list");
  if (!LIST_ACTIONS[list].includes(action)) return usage(`${action} does not apply to ${list} (${LIST_ACTIONS[list].join(", ")} does)`);
  const reason = flags.get("reason");
  if (!reason?.trim()) return usage("apply needs --reason");
  const filter = filterOf(flags);
  if (typeof filter === "string") return usage(filter);
  const { total } = await listNeeds(ctx.sql, list, filter, { limit: 1, offset: 0 });
  const touches = Math.min(total, MAX_LIST_ACTION);
  // The count first: nothing is done until the operator hands it back.
  if (flags.get("yes") !== String(touches)) return json({ job: "apply", action, list, matched: total, wouldTouch: touches, next: `run again with --yes ${touches} to ${action} them` });
  const result = await actOnList(ctx, list, filter, { action, reason, actor });
  return json("refused" in result ? { job: "apply", refused: result.refused } : { job: "apply", action, list, matched: result.matched, done: result.done, failed: result.failed });
}

export function resolutionArg(how: string | undefined, value: string | undefined): Resolution | string {
  if (how === undefined) return { kind: "retry" };
  if (how === "succeeded" && value) return { kind: how, processorId: value };
  if (how === "refused" && value) return { kind: how, code: value };
  return `resolve's outcome must be "succeeded <processor id>" or "refused <code>", got "${how}${value ? ` ${value}` : ""}"`;
}
