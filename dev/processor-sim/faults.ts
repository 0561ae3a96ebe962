// The faults in force: a latency and rules, the first matching rule hitting a call. Rules
// with `times` lift themselves once used up; "refuse" is handled by the server (index.ts).
import type { SimFaultKind, SimFaultRule, SimFaults, SimOperation } from "./types.ts";

const KINDS: ReadonlySet<string> = new Set<SimFaultKind>(["refuse", "500-before", "500-after", "hang", "drop-after"]);
const OPS: ReadonlySet<string> = new Set<SimOperation | "any">(["create", "confirm", "retrieve", "capture", "cancel", "incrementAuthorization", "refund", "retrieveRefund", "listRefunds", "any"]);
const RULE_FIELDS: ReadonlySet<string> = new Set(["kind", "op", "times", "probability", "paymentMethod", "refuseForMs"]);

interface LiveRule {
  readonly rule: SimFaultRule;
  left: number;
}

export class FaultSet {
  private latencyMs: number | undefined;
  private rules: LiveRule[] = [];

  replace(faults: SimFaults): void {
    const wrong = faultsProblem(faults);
    if (wrong) throw new TypeError(`invalid faults: ${wrong}`);
    this.latencyMs = faults.latencyMs;
    this.rules = (faults.rules ?? []).map((rule) => ({ rule: { ...rule }, left: rule.times ?? Number.POSITIVE_INFINITY }));
  }

  clear(): void {
    this.latencyMs = undefined;
    this.rules = [];
  }

  latency(fallbackMs: number): number {
    return this.latencyMs ?? fallbackMs;
  }

  /** The "refuse" rule in force, if any. */
  refusal(): SimFaultRule | undefined {
    return this.rules.find((live) => live.rule.kind === "refuse")?.rule;
  }

  /** Drops a "refuse" rule (its refuseForMs has passed); true when one was there. */
  liftRefusal(rule: SimFaultRule): boolean {
    const before = this.rules.length;
    this.rules = this.rules.filter((live) => live.rule !== rule);
    return this.rules.length !== before;
  }

  /** The fault that hits this call, among the kinds that can apply to it; uses up one of its times. */
  pick(op: SimOperation, paymentMethod: string | null, eligible: ReadonlySet<SimFaultKind>): SimFaultKind | undefined {
    for (const live of this.rules) {
      const { rule } = live;
      if (rule.kind === "refuse" || !eligible.has(rule.kind) || live.left <= 0) continue;
      if (rule.op !== undefined && rule.op !== "any" && rule.op !== op) continue;
      if (rule.paymentMethod !== undefined && rule.paymentMethod !== paymentMethod) continue;
      if (rule.probability !== undefined && Math.random() >= rule.probability) continue;
      live.left -= 1;
      return rule.kind;
    }
    return undefined;
  }

  snapshot(): SimFaults {
    return { ...(this.latencyMs === undefined ? {} : { latencyMs: this.latencyMs }), rules: this.rules.filter((live) => live.left > 0).map(remaining) };
  }
}

/** A rule as it stands: `times` is what is left of it. */
function remaining(live: LiveRule): SimFaultRule {
  return Number.isFinite(live.left) ? { ...live.rule, times: live.left } : live.rule;
}

/** What is wrong with a SimFaults value (from JSON, say), or undefined when it is one. */
export function faultsProblem(value: unknown): string | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return "faults must be an object";
  const { latencyMs, rules, ...rest } = value as Record<string, unknown>;
  if (Object.keys(rest).length > 0) return `unknown field ${Object.keys(rest)[0]}`;
  if (latencyMs !== undefined && !isCount(latencyMs)) return "latencyMs must be a non-negative integer";
  if (rules === undefined) return undefined;
  if (!Array.isArray(rules)) return "rules must be an array";
  for (const [index, rule] of rules.entries()) {
    const wrong = ruleProblem(rule);
    if (wrong) return `rules[${index}]: ${wrong}`;
  }
  return undefined;
}

function ruleProblem(rule: unknown): string | undefined {
  if (typeof rule !== "object" || rule === null || Array.isArray(rule)) return "a rule must be an object";
  const fields = rule as Record<string, unknown>;
  const unknown = Object.keys(fields).find((name) => !RULE_FIELDS.has(name));
  if (unknown) return `unknown field ${unknown}`;
  if (typeof fields.kind !== "string" || !KINDS.has(fields.kind)) return `kind must be one of ${[...KINDS].join(", ")}`;
  if (fields.op !== undefined && (typeof fields.op !== "string" || !OPS.has(fields.op))) return `op must be one of ${[...OPS].join(", ")}`;
  if (fields.times !== undefined && (!isCount(fields.times) || fields.times < 1)) return "times must be a positive integer";
  const probability = fields.probability;
  if (probability !== undefined && (typeof probability !== "number" || !(probability >= 0 && probability <= 1))) return "probability must be a number from 0 to 1";
  if (fields.paymentMethod !== undefined && typeof fields.paymentMethod !== "string") return "paymentMethod must be a string";
  if (fields.refuseForMs !== undefined && (!isCount(fields.refuseForMs) || fields.refuseForMs < 1)) return "refuseForMs must be a positive integer";
  if (fields.refuseForMs !== undefined && fields.kind !== "refuse") return "refuseForMs applies to refuse only";
  return undefined;
}

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}
