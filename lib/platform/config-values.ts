// The readers of one configuration value each, for config.ts and its neighbours: a bad value is
// a ConfigError naming the variable, and a URL is only ever echoed masked.
import { isIP } from "node:net";
import { maskUrl } from "./redact.ts";
import { parseDatabaseUrl } from "./database-url.ts";

export class ConfigError extends Error {
  override name = "ConfigError";
}

export type Env = Record<string, string | undefined>;

export function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === "") return fallback;
  const value = Number(raw.trim());
  if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new ConfigError(`${name} must be an integer between ${min} and ${max}, got "${raw}"`);
  }
  return value;
}

/** `raw`, trimmed and lower-cased, when it is one of `values`. */
export function oneOf<T extends string>(name: string, raw: string, values: readonly T[]): T {
  const value = raw.trim().toLowerCase();
  const found = values.find((v) => v === value);
  if (!found) throw new ConfigError(`${name} must be one of ${values.join(", ")}, got "${value}"`);
  return found;
}

export function url(env: Env, name: string, fallback: string, protocols: readonly string[]): string {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === "") return fallback;
  if (!URL.canParse(raw)) throw new ConfigError(`${name} is not a URL: "${maskUrl(raw)}"`);
  const { protocol } = new URL(raw);
  if (!protocols.includes(protocol)) {
    throw new ConfigError(`${name} must use ${protocols.join(" or ")}, got "${protocol}"`);
  }
  return raw;
}

/** One URL or a comma-separated list (MQTT_URL's brokers); a "," inside an entry is written %2C. */
export function urlList(env: Env, name: string, fallback: string, protocols: readonly string[]): readonly string[] {
  const entries = (env[name]?.trim() ?? "").split(",").map((entry) => entry.trim());
  // A single URL is refused in url()'s own words.
  if (entries.length === 1) return Object.freeze([url(env, name, fallback, protocols)]);
  for (const [i, entry] of entries.entries()) {
    if (entry === "") throw new ConfigError(`${name} entry ${i + 1} of ${entries.length} is empty`);
    url({ [`${name} entry ${i + 1}`]: entry }, `${name} entry ${i + 1}`, "", protocols);
    const first = entries.indexOf(entry);
    // A broker named twice is a typo: the move after its loss would come back to it at once.
    if (first < i) throw new ConfigError(`${name} entry ${i + 1} repeats entry ${first + 1}: "${maskUrl(entry)}"`);
  }
  return Object.freeze(entries);
}

/** A libpq-style URL, one host or a list (database-url.ts). */
export function databaseUrl(env: Env, name: string, fallback: string): string {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === "") return fallback;
  const parsed = parseDatabaseUrl(raw);
  if (parsed.kind === "refused") throw new ConfigError(`${name} ${parsed.reason}: "${maskUrl(raw)}"`);
  return raw;
}

export function flag(env: Env, name: string, fallback = false): boolean {
  const raw = (env[name] ?? "").trim().toLowerCase();
  if (raw === "") return fallback;
  if (raw === "0" || raw === "false") return false;
  if (raw === "1" || raw === "true") return true;
  throw new ConfigError(`${name} must be 1, true, 0 or false, got "${raw}"`);
}

// DNS labels; an IP address is checked by isIP.
const HOST_NAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

export function host(env: Env, name: string, fallback: string): string {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === "") return fallback;
  if (isIP(raw) === 0 && !HOST_NAME.test(raw)) {
    throw new ConfigError(`${name} must be an IP address or a host name, got "${raw}"`);
  }
  return raw;
}

/** A secret of at least `min` bytes; only its length is ever echoed. */
export function secret(name: string, raw: string | undefined, min: number): string | undefined {
  const bytes = raw ? new TextEncoder().encode(raw).byteLength : 0;
  if (raw && bytes < min) throw new ConfigError(`${name} must be at least ${min} bytes, got ${bytes}`);
  return raw || undefined;
}
