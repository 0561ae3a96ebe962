// The readers of one configuration value each, for lib/platform/config.ts (the one module that
// reads the environment): a bad value is a ConfigError naming the variable, and a URL is only
// ever echoed masked.
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
  if (!/^\d+$/.test(raw.trim())) {
    throw new ConfigError(`${name} must be an integer between ${min} and ${max}, got "${raw}"`);
  }
  const value = Number(raw.trim());
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new ConfigError(`${name} must be an integer between ${min} and ${max}, got "${raw}"`);
  }
  return value;
}

export function url(env: Env, name: string, fallback: string, protocols: readonly string[]): string {
  const raw = env[name];
  if (raw === undefined || raw.trim() === "") return fallback;
  let parsed: URL;
  try {
    parsed = new URL(raw.trim());
  } catch {
    // The value may carry a password: only its masked form is ever echoed.
    throw new ConfigError(`${name} is not a URL: "${maskUrl(raw.trim())}"`);
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(`${name} must use ${protocols.join(" or ")}, got "${parsed.protocol}"`);
  }
  return raw.trim();
}

/**
 * One URL or a comma-separated list of them (MQTT_URL's brokers), each checked as url() checks
 * one; an entry is named by its place and shown masked. A "," inside an entry (a password)
 * must be written %2C.
 */
export function urlList(env: Env, name: string, fallback: string, protocols: readonly string[]): readonly string[] {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === "") return Object.freeze([fallback]);
  const entries = raw.split(",").map((entry) => entry.trim());
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

/** A libpq-style URL, one host or a list (lib/platform/database-url.ts); refused with its masked form. */
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

// An IPv4 or IPv6 address, or a host name made of DNS labels.
const HOST_NAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

export function host(env: Env, name: string, fallback: string): string {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === "") return fallback;
  if (isIP(raw) === 0 && !HOST_NAME.test(raw)) {
    throw new ConfigError(`${name} must be an IP address or a host name, got "${raw}"`);
  }
  return raw;
}
