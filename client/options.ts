// The client's own options, checked where the caller passed them: a wrong baseUrl or token is
// a bug in the caller, thrown as a TypeError at once and never retried as if the network had
// failed. Only what the network or the server did is retried (client/send.ts).

/** The base URL without its trailing slashes; throws unless it is an absolute http(s) URL. */
export function checkedBaseUrl(value: unknown): string {
  const text = typeof value === "string" ? value.trim() : "";
  const parsed = parseUrl(text);
  if (parsed === undefined || (parsed.protocol !== "http:" && parsed.protocol !== "https:")) {
    throw new TypeError(`ChargesClient: baseUrl must be an absolute http(s) URL such as "https://api.example", got ${JSON.stringify(value)}`);
  }
  if (parsed.search !== "" || parsed.hash !== "") throw new TypeError(`ChargesClient: baseUrl must have no query or fragment, got ${JSON.stringify(value)}`);
  return text.replace(/\/+$/, "");
}

function parseUrl(text: string): URL | undefined {
  try {
    return new URL(text);
  } catch {
    return undefined;
  }
}

export type TokenOption = string | (() => string | Promise<string>) | undefined;

// A bearer token is one word of visible ASCII (RFC 6750 §2.1 b64token, loosened to what a
// header value carries): a space, a line break or a non-ASCII character would make fetch
// refuse the header, which would otherwise look like a network failure.
const TOKEN = /^[\x21-\x7e]+$/;

/** The function asked before every try: the token, or undefined to send no Authorization header. */
export function tokenSource(option: TokenOption): () => Promise<string | undefined> {
  if (option === undefined) return async () => undefined;
  if (typeof option === "string") {
    checkToken(option, "token");
    return async () => option;
  }
  if (typeof option !== "function") throw new TypeError(`ChargesClient: token must be a string or a function returning one, got ${typeof option}`);
  return async () => {
    let value: unknown;
    try {
      value = await option();
    } catch (error) {
      throw new TypeError(`ChargesClient: the token function threw (${error instanceof Error ? error.message : String(error)}); nothing was sent`, { cause: error });
    }
    checkToken(value, "the token function's value");
    return value as string;
  };
}

function checkToken(value: unknown, what: string): void {
  if (typeof value === "string" && TOKEN.test(value)) return;
  const shown = typeof value === "string" ? (value === "" ? "an empty string" : "a string with spaces, line breaks or non-ASCII characters") : typeof value;
  throw new TypeError(`ChargesClient: ${what} must be a bearer token (visible ASCII, no spaces), got ${shown}; nothing was sent`);
}
