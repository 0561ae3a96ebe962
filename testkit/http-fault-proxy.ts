// A fault-injecting HTTP/1.1 proxy on raw TCP (node:net), between a client and one or more API
// processes. Every request is read whole and forwarded (round robin; an upstream that refuses
// the connection is skipped, as a load balancer does). Then, per request, a fate decides what
// the client gets: the answer ("pass"), nothing after the server has answered ("drop": the
// connection closes, the answer is lost), a reset halfway through the request ("reset": the
// server gets half of it), or the answer after `delayMs` ("delay": past the client's per-try
// timeout), a 500 of its own in place of the server's answer ("fail": the server committed, the
// client learns nothing but an error), or, without forwarding, a 503 of its own with a
// Retry-After ("unavailable": a load balancer with no upstream) or a 429 ("limited": a rate
// limiter in front). Each connection carries one request (Connection: close both ways), so a lost
// answer never poisons a pooled connection. It records the body hashes each key was sent with,
// the fates each key met, in order, and the statuses the server answered each key with.
import { createHash } from "node:crypto";
import { createServer, connect, type Server, type Socket } from "node:net";

export type Fate = "pass" | "drop" | "reset" | "delay" | "unavailable" | "limited" | "fail";

export interface SeenRequest {
  readonly method: string;
  readonly path: string;
  /** The Idempotency-Key header's value, unquoted; undefined when absent. */
  readonly key: string | undefined;
  /** SHA-256 of the body bytes, hex. */
  readonly bodyHash: string;
}

export interface FaultProxyOptions {
  /** The ports of the API processes, asked per request (a restarted process keeps its port). */
  readonly upstreams: readonly number[];
  /** The fate of each request; "pass" for all by default. */
  readonly decide?: (request: SeenRequest) => Fate;
  /** The Retry-After of an "unavailable" or "limited" answer (default "1"). */
  readonly retryAfter?: () => string;
  /** How long a "delay" holds the answer back. */
  readonly delayMs?: number;
  /** A `Should-Retry` header on the proxy's own answers ("unavailable", "limited", "fail"); none by default. */
  readonly shouldRetry?: () => string | undefined;
}

export interface FaultProxy {
  readonly port: number;
  readonly url: string;
  /** Requests by fate, those no upstream accepted, and those whose upstream closed before a whole answer (a killed API). */
  readonly counts: Record<Fate | "requests" | "unrouted" | "cut", number>;
  /** Every distinct body hash seen per key. */
  readonly bodiesByKey: Map<string, Set<string>>;
  /** The fates each key's requests met, in the order they came. */
  readonly fatesByKey: Map<string, Fate[]>;
  /** The statuses the upstream answered each key's requests with (whatever the client then got), in the order answered. */
  readonly answersByKey: Map<string, number[]>;
  close(): Promise<void>;
}

const HEAD_END = Buffer.from("\r\n\r\n");
// A request or answer head larger than this is not one this project's API exchanges.
const MAX_HEAD_BYTES = 64 * 1024;
const DEFAULT_DELAY_MS = 2_000;

/** A decider that picks each fate with the given shares (the rest pass), from `random` in [0, 1). */
export function sharesDecider(shares: Partial<Record<Exclude<Fate, "pass">, number>>, random: () => number = Math.random): () => Fate {
  return () => {
    let r = random();
    for (const fate of ["drop", "reset", "delay", "unavailable", "limited", "fail"] as const) {
      r -= shares[fate] ?? 0;
      if (r < 0) return fate;
    }
    return "pass";
  };
}

/** A small seeded generator (mulberry32), so a scenario's faults can be replayed. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface ProxyState {
  readonly options: FaultProxyOptions;
  readonly counts: FaultProxy["counts"];
  readonly bodiesByKey: Map<string, Set<string>>;
  readonly fatesByKey: Map<string, Fate[]>;
  readonly answersByKey: Map<string, number[]>;
  readonly sockets: Set<Socket>;
  /** The upstreams in the order to try for the next request (round robin). */
  route(): number[];
}

export async function startFaultProxy(options: FaultProxyOptions): Promise<FaultProxy> {
  let next = 0;
  const state: ProxyState = {
    options,
    counts: { pass: 0, drop: 0, reset: 0, delay: 0, unavailable: 0, limited: 0, fail: 0, requests: 0, unrouted: 0, cut: 0 },
    bodiesByKey: new Map(),
    fatesByKey: new Map(),
    answersByKey: new Map(),
    sockets: new Set(),
    route: () => {
      const list = options.upstreams;
      next = (next + 1) % list.length;
      return list.map((_, i) => list[(next + i) % list.length]!);
    },
  };
  const server: Server = createServer((client) => onConnection(state, client));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    counts: state.counts,
    bodiesByKey: state.bodiesByKey,
    fatesByKey: state.fatesByKey,
    answersByKey: state.answersByKey,
    close: () => {
      for (const socket of state.sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function onConnection(state: ProxyState, client: Socket): void {
  state.sockets.add(client);
  client.on("close", () => state.sockets.delete(client));
  client.on("error", () => {});
  readMessage(client, (request) => {
    const seen = describe(request);
    state.counts.requests += 1;
    if (seen.key !== undefined) {
      const bodies = state.bodiesByKey.get(seen.key) ?? new Set<string>();
      bodies.add(seen.bodyHash);
      state.bodiesByKey.set(seen.key, bodies);
    }
    const fate = state.options.decide?.(seen) ?? "pass";
    state.counts[fate] += 1;
    if (seen.key !== undefined) state.fatesByKey.set(seen.key, [...(state.fatesByKey.get(seen.key) ?? []), fate]);
    const hint = state.options.shouldRetry?.();
    if (fate === "unavailable") return void client.end(ownAnswer(503, "no upstream (fault proxy)", hint, state.options.retryAfter?.() ?? "1"));
    if (fate === "limited") return void client.end(ownAnswer(429, "rate limited (fault proxy)", hint, state.options.retryAfter?.() ?? "1"));
    const delayMs = state.options.delayMs ?? DEFAULT_DELAY_MS;
    const failure = ownAnswer(500, "the answer was replaced (fault proxy)", hint);
    const onAnswer = (status: number): void => {
      if (seen.key !== undefined) state.answersByKey.set(seen.key, [...(state.answersByKey.get(seen.key) ?? []), status]);
    };
    void forward(client, withConnectionClose(request), state.route(), { fate, delayMs, failure, onAnswer }, state.sockets).then((end) => {
      if (end === "unrouted" || end === "cut") state.counts[end] += 1;
    });
  });
}

const TITLES = { 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable" } as const;

/** The proxy's own answer (a load balancer's 503, a rate limiter's 429, a 500): a problem body, optional Retry-After and Should-Retry, the connection closed. */
function ownAnswer(status: keyof typeof TITLES, detail: string, shouldRetry: string | undefined, retryAfter?: string): Buffer {
  const title = TITLES[status];
  const body = JSON.stringify({ type: "about:blank", title, status, detail });
  const head = [
    `HTTP/1.1 ${status} ${title}`,
    "Content-Type: application/problem+json",
    ...(retryAfter === undefined ? [] : [`Retry-After: ${retryAfter}`]),
    ...(shouldRetry === undefined ? [] : [`Should-Retry: ${shouldRetry}`]),
    `Content-Length: ${Buffer.byteLength(body)}`,
    "Connection: close",
  ];
  return Buffer.from(`${head.join("\r\n")}\r\n\r\n${body}`, "latin1");
}

/** Reads one HTTP message (head + Content-Length body) from `socket`, then calls `onMessage` once. */
function readMessage(socket: Socket, onMessage: (message: Buffer) => void): void {
  let buffered = Buffer.alloc(0);
  let done = false;
  const onData = (chunk: Buffer): void => {
    if (done) return;
    buffered = Buffer.concat([buffered, chunk]);
    const length = messageLength(buffered);
    if (length === "invalid") return void socket.destroy();
    if (length === undefined || buffered.length < length) return;
    done = true;
    socket.off("data", onData);
    onMessage(buffered.subarray(0, length));
  };
  socket.on("data", onData);
}

/** The whole message's length once its head is in; undefined while it is not. */
function messageLength(buffered: Buffer): number | "invalid" | undefined {
  const end = buffered.indexOf(HEAD_END);
  if (end < 0) return buffered.length > MAX_HEAD_BYTES ? "invalid" : undefined;
  const head = buffered.subarray(0, end).toString("latin1");
  const match = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (/\r\ntransfer-encoding:/i.test(head) && !match) return "invalid";
  return end + HEAD_END.length + (match ? Number(match[1]) : 0);
}

function describe(request: Buffer): SeenRequest {
  const end = request.indexOf(HEAD_END);
  const head = request.subarray(0, end).toString("latin1");
  const [method = "", path = ""] = head.slice(0, head.indexOf("\r\n")).split(" ");
  const raw = /\r\nidempotency-key:\s*([^\r\n]*)/i.exec(head)?.[1]?.trim();
  const key = raw === undefined ? undefined : raw.replace(/^"(.*)"$/, "$1").replace(/\\(.)/g, "$1");
  const bodyHash = createHash("sha256").update(request.subarray(end + HEAD_END.length)).digest("hex");
  return { method, path, key, bodyHash };
}

/** The message with its Connection header replaced by `Connection: close`. */
function withConnectionClose(message: Buffer): Buffer {
  const end = message.indexOf(HEAD_END);
  const lines = message.subarray(0, end).toString("latin1").split("\r\n").filter((line) => !/^connection:/i.test(line));
  return Buffer.concat([Buffer.from(`${lines.join("\r\n")}\r\nConnection: close`, "latin1"), message.subarray(end)]);
}

type End = "answered" | "reset" | "unrouted" | "cut";

interface Handling {
  readonly fate: Fate;
  readonly delayMs: number;
  /** What a "fail" sends instead of the server's answer. */
  readonly failure: Buffer;
  /** Told the status of the server's whole answer, before its fate is applied. */
  readonly onAnswer: (status: number) => void;
}

/** Sends the request to the first upstream that accepts it and hands the answer its fate; how it ended. */
async function forward(client: Socket, request: Buffer, ports: readonly number[], handling: Handling, sockets: Set<Socket>): Promise<End> {
  const { fate, delayMs } = handling;
  const upstream = await firstAccepting(ports, sockets);
  if (!upstream) {
    client.destroy();
    return "unrouted";
  }
  if (fate === "reset") {
    upstream.write(request.subarray(0, Math.floor(request.length / 2)), () => upstream.resetAndDestroy());
    client.resetAndDestroy();
    return "reset";
  }
  let answered = false;
  let settle: (end: End) => void = () => {};
  const ended = new Promise<End>((resolve) => (settle = resolve));
  upstream.on("error", () => {});
  // An upstream that closes before a whole answer (a killed API) loses the answer too.
  upstream.on("close", () => {
    if (!answered) client.destroy();
    settle(answered ? "answered" : "cut");
  });
  upstream.write(request);
  readMessage(upstream, (answer) => {
    answered = true;
    handling.onAnswer(Number(/^HTTP\/1\.[01] (\d{3})/.exec(answer.toString("latin1", 0, 16))?.[1] ?? 0));
    upstream.destroy();
    if (fate === "drop") return void client.destroy();
    if (fate === "fail") return void client.end(handling.failure);
    const send = (): void => void client.end(withConnectionClose(answer));
    if (fate === "delay") setTimeout(send, delayMs);
    else send();
  });
  return ended;
}

function firstAccepting(ports: readonly number[], sockets: Set<Socket>): Promise<Socket | undefined> {
  return ports.reduce<Promise<Socket | undefined>>(
    (found, port) => found.then((socket) => socket ?? tryConnect(port, sockets)),
    Promise.resolve(undefined),
  );
}

function tryConnect(port: number, sockets: Set<Socket>): Promise<Socket | undefined> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: "127.0.0.1" });
    socket.once("connect", () => {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
      resolve(socket);
    });
    socket.once("error", () => resolve(undefined));
  });
}
