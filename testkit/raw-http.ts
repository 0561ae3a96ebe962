// HTTP as a client writes it on a socket: a request line and headers exactly as given (no Host
// unless the test adds one, HTTP/1.0, a short Host, a path the URL parser would rewrite), and
// the answer parsed from the bytes the server sent.
import net from "node:net";

export interface RawResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/** Parses what a server sent on one connection (the first answer only). */
export function parseRaw(all: string): RawResponse {
  const end = all.indexOf("\r\n\r\n");
  if (end === -1) throw new Error(`no HTTP answer: ${JSON.stringify(all.slice(0, 200))}`);
  const [statusLine, ...lines] = all.slice(0, end).split("\r\n");
  const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
  return { status: Number(statusLine!.split(" ")[1]), headers, body: all.slice(end + 4) };
}

/** Writes `text` as it is and reads until the server closes the connection. */
export function exchange(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => socket.write(text));
    const chunks: Buffer[] = [];
    socket.on("data", (chunk) => chunks.push(Buffer.from(chunk)));
    socket.on("error", reject);
    socket.on("close", () => resolve(Buffer.concat(chunks).toString("utf8")));
  });
}

/**
 * Sends `head` as written and `body` with a content-length (or as one chunk), reads until the
 * server closes, parses the answer.
 */
export async function raw(port: number, head: string[], body = "", framing: "length" | "chunked" = "length"): Promise<RawResponse> {
  const size = Buffer.byteLength(body);
  const framed =
    framing === "chunked"
      ? `transfer-encoding: chunked\r\n\r\n${size.toString(16)}\r\n${body}\r\n0\r\n\r\n`
      : `${body ? `content-length: ${size}\r\n` : ""}\r\n${body}`;
  return parseRaw(await exchange(port, `${head.join("\r\n")}\r\n${framed}`));
}

/**
 * Sends `head` (its blank line included) and nothing more, and resolves with the first answer
 * the server writes while the connection is left open: for a request whose announced body
 * never comes. The socket is closed after the answer.
 */
export function answerWithoutBody(port: number, head: string[]): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => socket.write(`${head.join("\r\n")}\r\n\r\n`));
    let text = "";
    socket.on("data", (chunk) => {
      text += Buffer.from(chunk).toString("utf8");
      const end = text.indexOf("\r\n\r\n");
      if (end === -1) return;
      const answer = parseRaw(text);
      const length = Number(answer.headers["content-length"] ?? 0);
      if (Buffer.byteLength(answer.body) < length) return;
      socket.destroy();
      resolve(answer);
    });
    socket.on("error", reject);
    socket.on("close", () => reject(new Error(`closed without an answer: ${JSON.stringify(text.slice(0, 200))}`)));
  });
}

export const http10 = (requestLine: string, ...headers: string[]): string[] => [`${requestLine} HTTP/1.0`, ...headers];
export const http11 = (requestLine: string, ...headers: string[]): string[] => [`${requestLine} HTTP/1.1`, ...headers, "connection: close"];
