// The operator's actions on one target or a filtered list, each with a reason, recorded in
// operator_audit and a log line whether from the console or `bun run ops`.
import type { Sql } from "../platform/db.ts";
import type { Logger } from "../platform/log.ts";
import type { ProcessorAdapter } from "../charges/processor.ts";
import { foreignOperations } from "../charges/index.ts";
import { resolveParked, type Resolution, type ResolveResult } from "../idempotency/completer.ts";
import { notifyOutbox } from "../platform/wakeup.ts";
import { isUuid } from "../platform/uuid.ts";
import { discardRow, releaseAggregate, requeue } from "./sql.ts";
import { listNeeds, type ListFilter, type ListKind } from "./lists.ts";

const ACTIONS = ["resolve", "requeue", "discard", "release"] as const;
export type ActionName = (typeof ACTIONS)[number];
export const isAction = (value: string | undefined): value is ActionName => ACTIONS.some((a) => a === value);

export const LIST_ACTIONS: Readonly<Record<ListKind, readonly ActionName[]>> = {
  "parked-keys": ["resolve"],
  "stale-keys": ["resolve"],
  "parked-rows": ["requeue", "discard"],
  "held-rows": ["release"],
};

export interface Actor {
  /** The console token's `sub`, or the CLI's OPS_ACTOR (else the login name). */
  readonly name: string;
  readonly via: "console" | "cli";
}

export interface OpsContext {
  readonly sql: Sql;
  readonly log: Logger;
  /** Undefined with PAYMENT_PROCESSOR=none: a resolve that reads the processor cannot run. */
  readonly processor: ProcessorAdapter | undefined;
  readonly leaseMs: number;
}

export interface ActionRequest {
  readonly action: ActionName;
  readonly target: string;
  readonly reason: string;
  readonly actor: Actor;
  /** For resolve: read the processor and drive the key (default), or the outcome the operator read there. */
  readonly resolution?: Resolution;
}

export type ActionResult =
  | { readonly done: true; readonly action: ActionName; readonly target: string; readonly detail: Readonly<Record<string, unknown>> }
  | { readonly done: false; readonly action: ActionName; readonly target: string; readonly reason: "reason_required" | "no_processor" | "not_found" | "held" };

// A reason is a sentence, not an essay: the audit row and the log line carry it whole.
const MAX_REASON_CHARS = 500;
// A list action touches at most this many entries; the rest stay for another run.
export const MAX_LIST_ACTION = 1000;

const reasonMissing = (reason: string) => reason.trim() === "" || reason.trim().length > MAX_REASON_CHARS;

const ROW_ACTIONS = { requeue, discard: discardRow, release: releaseAggregate };

/** Recorded once attempted (a refusal for want of a reason records nothing). */
export async function act(ctx: OpsContext, request: ActionRequest): Promise<ActionResult> {
  const { action, target } = request;
  if (reasonMissing(request.reason)) return { done: false, action, target, reason: "reason_required" };
  const reason = request.reason.trim();
  const result = await perform(ctx, request);
  const outcome = result.done ? { done: true, ...result.detail } : { done: false, reason: result.reason };
  await recordAction(ctx.sql, { actor: request.actor, action, target, reason, outcome });
  ctx.log.info("operator action", { actor: request.actor.name, via: request.actor.via, action, target, reason, outcome });
  return result;
}

async function perform(ctx: OpsContext, request: ActionRequest): Promise<ActionResult> {
  const { action, target } = request;
  if (action !== "resolve") {
    const count = await ROW_ACTIONS[action](ctx.sql, target);
    if (count === 0) return { done: false, action, target, reason: "not_found" };
    await notifyOutbox(ctx.sql);
    return { done: true, action, target, detail: { rows: count } };
  }
  const resolution = request.resolution ?? { kind: "retry" };
  if (resolution.kind === "retry" && ctx.processor === undefined) return { done: false, action, target, reason: "no_processor" };
  const resolved = await resolveKey(ctx.sql, target, resolution, ctx.processor, ctx.leaseMs);
  if (!resolved.resolved) return { done: false, action, target, reason: resolved.reason };
  await notifyOutbox(ctx.sql);
  return { done: true, action, target, detail: { resolution: resolution.kind, outcome: resolved.outcome, ...(resolved.status !== undefined && { status: resolved.status }) } };
}

export function resolveKey(sql: Sql, id: string, resolution: Resolution, processor: ProcessorAdapter | undefined, leaseMs: number): Promise<ResolveResult> {
  // Not an id: nothing to resolve (a value, not a 22P02 from the comparison).
  if (!isUuid(id)) return Promise.resolve({ resolved: false, reason: "not_found" });
  return resolveParked(sql, id, resolution, foreignOperations(), processor, leaseMs);
}

/** The action on every entry the filter matches now (at most MAX_LIST_ACTION), each audited as its own. */
export async function actOnList(ctx: OpsContext, kind: ListKind, filter: ListFilter, request: Omit<ActionRequest, "target">) {
  if (!LIST_ACTIONS[kind].includes(request.action)) return { refused: "action_not_for_list" as const };
  if (reasonMissing(request.reason)) return { refused: "reason_required" as const };
  const list = await listNeeds(ctx.sql, kind, filter, { limit: MAX_LIST_ACTION, offset: 0 });
  const targets = [...new Set(list.targets.filter((t) => t !== ""))];
  const results: ActionResult[] = [];
  for (const target of targets) results.push(await act(ctx, { ...request, target }));
  const done = results.filter((r) => r.done).length;
  return { matched: list.total, done, failed: results.length - done, results };
}

export type ListActionResult = Exclude<Awaited<ReturnType<typeof actOnList>>, { refused: string }>;

type Outcome = Readonly<Record<string, unknown>>;

// Written after the action, so the outcome recorded is the real one.
async function recordAction(sql: Sql, entry: Omit<ActionRequest, "resolution"> & { outcome: Outcome }): Promise<void> {
  await sql`
    insert into operator_audit (actor, via, action, target, reason, outcome)
    values (${entry.actor.name}, ${entry.actor.via}, ${entry.action}, ${entry.target}, ${entry.reason}, ${sql.json(entry.outcome as never)})`;
}

type AuditText = "id" | "at" | "actor" | "via" | "action" | "target" | "reason";
export type AuditRow = Readonly<Record<AuditText, string>> & { readonly outcome: Outcome };

export async function listAudit(sql: Sql, limit: number, offset: number): Promise<{ total: number; rows: AuditRow[] }> {
  const rows = await sql<(AuditRow & { total: number })[]>`
    select id::text, to_char(at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as at, actor, via, action, target, reason, outcome,
           count(*) over ()::int as total
      from operator_audit
     order by at desc, id desc
     limit ${limit} offset ${offset}`;
  return { total: rows[0]?.total ?? 0, rows: rows.map(({ total: _, ...row }) => row) };
}
