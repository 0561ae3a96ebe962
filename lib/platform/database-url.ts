// DATABASE_URL in libpq's URI form, one host or a failover list tried in order for every new
// connection, parsed for the configuration (which refuses a bad one at start) and for createSql.
import { isIP } from "node:net";

type TargetSessionAttrs = "any" | "read-write" | "primary";

type DatabaseUrl =
  | { readonly kind: "parsed"; readonly targetSessionAttrs: TargetSessionAttrs }
  /** `reason` never holds the URL's text: the caller shows the masked URL beside it. */
  | { readonly kind: "refused"; readonly reason: string };

const SCHEMES = ["postgres:", "postgresql:"];
const PARAM = "target_session_attrs";
const WRITABLE: readonly TargetSessionAttrs[] = ["read-write", "primary", "any"];
// libpq's other values allow a standby, which refuses every write, and every process here writes.
const READ_ONLY = ["read-only", "standby", "prefer-standby"];
const MAX_PORT = 65_535;
// A host name as RFC 3986 allows it in an authority, "," excepted: it separates the list.
const REG_NAME = /^[A-Za-z0-9\-._~%!$&'()*+;=]+$/;
// scheme://authority rest: the authority ends at the first "/", "?" or "#".
const SHAPE = /^([A-Za-z][A-Za-z0-9+.-]*:)\/\/([^/?#]*)(.*)$/s;

const refused = (reason: string): DatabaseUrl => ({ kind: "refused", reason });

export function parseDatabaseUrl(raw: string): DatabaseUrl {
  const shape = SHAPE.exec(raw);
  if (!shape) return refused("is not a URL");
  const [, scheme = "", authority = "", rest = ""] = shape;
  if (!SCHEMES.includes(scheme.toLowerCase())) return refused(`must use ${SCHEMES.join(" or ")}, got "${scheme}"`);
  // The last "@": a password holding a raw "@" stays in the user part.
  const at = authority.lastIndexOf("@");
  const entries = authority.slice(at + 1).split(",");
  // postgres.js 3.4.9 ends a list's userinfo at its first "@", so a raw one would become a host.
  if (entries.length > 1 && authority.slice(0, Math.max(at, 0)).includes("@")) {
    return refused('has a raw "@" in its user or password, which postgres.js misreads before a host list: write it as %40');
  }
  for (const [i, entry] of entries.entries()) {
    const problem = hostProblem(entry, entries.length);
    if (problem) return refused(entries.length > 1 ? `has a bad host list: entry ${i + 1} ${problem}` : `has a bad host, which ${problem}`);
  }
  // The rest (user, database, parameters) as the URL parser reads it, with the first host alone.
  const first = `${scheme}//${authority.slice(0, at + 1)}${entries[0]}${rest}`;
  if (!URL.canParse(first)) return refused("is not a URL");
  const target = targetOf(new URL(first).searchParams.getAll(PARAM));
  return "refused" in target ? refused(target.refused) : { kind: "parsed", targetSessionAttrs: target.attrs };
}

/** What is wrong with one entry of the list (in words that do not repeat it), if anything. */
function hostProblem(entry: string, entries: number): string | undefined {
  // No host at all is libpq's own default, a local server.
  if (entry === "") return entries === 1 ? undefined : "is empty";
  const bracketed = /^\[([^\]]*)\](?::(\d*))?$/.exec(entry);
  if (bracketed) {
    if (isIP(bracketed[1] ?? "") !== 6) return "is not an IPv6 address in brackets";
    // postgres.js 3.4.9 splits each entry of a list on ":", brackets or not.
    if (entries > 1) return "is an IPv6 address, which postgres.js cannot take in a list: use a host name";
    return portProblem(bracketed[2]);
  }
  const [name = "", port, extra] = entry.split(":");
  if (extra !== undefined || !REG_NAME.test(name)) return "is not a host name, an IPv4 address or an [IPv6] address";
  return portProblem(port);
}

function portProblem(port: string | undefined): string | undefined {
  if (port === undefined || port === "") return undefined;
  const value = /^\d+$/.test(port) ? Number(port) : 0;
  return value >= 1 && value <= MAX_PORT ? undefined : `has a port that is not an integer from 1 to ${MAX_PORT}`;
}

/** The parameter's value, or why it is refused. */
function targetOf(values: readonly string[]): { readonly attrs: TargetSessionAttrs } | { readonly refused: string } {
  if (values.length === 0) return { attrs: "any" };
  if (values.length > 1) return { refused: `names ${PARAM} ${values.length} times` };
  const value = values[0]!;
  const found = WRITABLE.find((attrs) => attrs === value);
  if (found) return { attrs: found };
  if (READ_ONLY.includes(value)) return { refused: `has ${PARAM}=${value}, which allows a standby, and every process writes: use read-write` };
  // Echoed only when it looks like a word: a misplaced password fragment must not reach a log.
  const shown = /^[A-Za-z-]{1,32}$/.test(value) ? `=${value}` : " with another value";
  return { refused: `has ${PARAM}${shown}; accepted: ${WRITABLE.join(", ")}` };
}

interface ClientTarget {
  readonly url: string;
  readonly target_session_attrs?: "primary";
}

// postgres.js 3.4.9's read-write checks only default_transaction_read_only, which a Postgres 14+
// hot standby reports "off" (hapostgres/pg_auto_failover#970), so it gets "primary"; "any" (libpq's
// default) it refuses as unknown, so it is left out. A refused URL is handed over as is.
export function clientTarget(raw: string): ClientTarget {
  const parsed = parseDatabaseUrl(raw);
  if (parsed.kind === "refused") return { url: raw };
  const [, scheme = "", authority = "", rest = ""] = SHAPE.exec(raw) ?? [];
  const url = `${scheme}//${authority}${withoutParam(rest)}`;
  return parsed.targetSessionAttrs === "any" ? { url } : { url, target_session_attrs: "primary" };
}

/** The path and query with target_session_attrs taken out, every other byte as it was. */
function withoutParam(rest: string): string {
  const q = rest.indexOf("?");
  if (q < 0) return rest;
  const hash = rest.indexOf("#", q);
  const query = rest.slice(q + 1, hash < 0 ? undefined : hash);
  const kept = query.split("&").filter((pair) => !new URLSearchParams(pair).has(PARAM));
  return `${rest.slice(0, q)}${kept.length > 0 ? `?${kept.join("&")}` : ""}${hash < 0 ? "" : rest.slice(hash)}`;
}
