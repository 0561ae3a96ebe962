// Structured logs: one JSON line per event on stdout, at LOG_LEVEL and above. They carry a hash
// of an idempotency key (keyHash), never the key, and never a token.
import type { LogLevel } from "./config.ts";

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export type LogFields = Record<string, unknown>;

export type Logger = ReturnType<typeof createLogger>;

export function createLogger(level: LogLevel, component: string, write: (line: string) => void = console.log) {
  const at = (lineLevel: Exclude<LogLevel, "silent">) => (msg: string, fields: LogFields = {}) => {
    if (RANK[lineLevel] < RANK[level]) return;
    write(JSON.stringify({ time: new Date().toISOString(), level: lineLevel, component, msg, ...fields }));
  };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

export const silentLogger: Logger = createLogger("silent", "none");
