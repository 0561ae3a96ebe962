// A payment processor on 127.0.0.1 that speaks the part of Stripe's v1 API the `stripe`
// package sends for PaymentIntents and Refunds (test cards, declines, idempotency keys), with
// faults to inject and a ledger of the money it moved. Used by dev mode, tests, chaos and the
// bench. Nothing starts at import time.
import type { IncomingMessage, ServerResponse } from "node:http";
import { control, CONTROL_PREFIX, type Controls } from "./control.ts";
import { FaultSet } from "./faults.ts";
import { Api, type Call } from "./handler.ts";
import { Listener } from "./listener.ts";
import type { SimFaults, SimLedger, SimRequestEntry } from "./types.ts";

export type * from "./types.ts";

export interface ProcessorSim {
  /** e.g. "http://127.0.0.1:41234" */
  readonly url: string;
  readonly port: number;
  ledger(): SimLedger;
  /** Replaces the faults in force. A "refuse" rule stops the listener at once. */
  setFaults(faults: SimFaults): void;
  clearFaults(): void;
  stop(): Promise<void>;
  /** The calls seen so far, newest last (the last 1000): to wait until a call is in flight, hung or answered. */
  requests(): SimRequestEntry[];
  /** Resolves once the listener is in the state the faults ask for (refusing, or listening again). */
  settled(): Promise<void>;
}

export interface ProcessorSimOptions {
  /** 0 or absent: a free port. */
  readonly port?: number;
  readonly hostname?: string;
  /** Delay before each answer, unless the faults set their own. */
  readonly latencyMs?: number;
  /** The clock of the idempotency keys' 24-hour retention (milliseconds); Date.now unless a test moves time. */
  readonly now?: () => number;
}

// A Stripe v1 request body is a small form; anything this big is not one.
const MAX_BODY_BYTES = 1024 * 1024;

export async function startProcessorSim(options: ProcessorSimOptions = {}): Promise<ProcessorSim> {
  const hostname = options.hostname ?? "127.0.0.1";
  const faults = new FaultSet();
  const api = new Api(faults, () => options.latencyMs ?? 0, options.now);
  // The listener starts below, after `controls` exists: no request reaches serve before.
  const listener = new Listener((request, response) => void serve(request, response, api, controls), hostname);
  const refusals = new RefusalSwitch(faults, listener);
  const setFaults = (next: SimFaults): void => {
    faults.replace(next);
    refusals.apply();
  };
  const clearFaults = (): void => {
    faults.clear();
    refusals.apply();
  };
  const controls: Controls = {
    ledger: () => api.store.ledger(),
    faults: () => faults.snapshot(),
    requests: () => api.log.list(),
    // Over HTTP, a refusal waits for its own answer to go out.
    setFaults: (next, answered) => {
      faults.replace(next);
      void answered.then(() => refusals.apply());
    },
    clearFaults,
  };
  const port = await listener.start(options.port ?? 0);
  const host = hostname.includes(":") ? `[${hostname}]` : hostname;
  return {
    url: `http://${host}:${port}`,
    port,
    ledger: () => api.store.ledger(),
    setFaults,
    clearFaults,
    requests: () => api.log.list(),
    settled: () => listener.settled(),
    stop: async () => {
      refusals.stop();
      await listener.close();
    },
  };
}

/** Keeps the listener in step with the "refuse" rule in force, and lifts one whose refuseForMs has passed. */
class RefusalSwitch {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;

  constructor(private readonly faults: FaultSet, private readonly listener: Listener) {}

  apply(): void {
    clearTimeout(this.timer);
    if (this.stopped) return;
    const rule = this.faults.refusal();
    this.listener.want(rule === undefined);
    if (rule?.refuseForMs === undefined) return;
    this.timer = setTimeout(() => {
      if (this.faults.liftRefusal(rule)) this.apply();
    }, rule.refuseForMs);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

async function serve(request: IncomingMessage, response: ServerResponse, api: Api, controls: Controls): Promise<void> {
  const closed = new Promise<void>((resolve) => response.once("close", () => resolve()));
  try {
    const url = new URL(request.url ?? "/", "http://processor-sim");
    const body = await readBody(request);
    if (body === undefined) return answerPlain(response, 413, "request body too large");
    if (url.pathname.startsWith(CONTROL_PREFIX)) return control(request.method ?? "GET", url.pathname, body, response, controls);
    const call: Call = {
      method: request.method ?? "GET",
      path: url.pathname,
      query: url.search.slice(1),
      body,
      header: (name) => {
        const value = request.headers[name];
        return Array.isArray(value) ? value.join(", ") : value;
      },
      closed,
      gone: () => response.destroyed || request.socket.destroyed,
    };
    const reply = await api.handle(call);
    if (reply.kind === "drop") request.socket.destroy();
    if (reply.kind !== "answer" || response.destroyed) return;
    response.writeHead(reply.status, reply.headers);
    response.end(reply.body);
  } catch (error) {
    // A bug in the simulator, not a fault asked for: say so, and answer 500 if still possible.
    console.error(`processor-sim: ${error instanceof Error ? error.stack : String(error)}`);
    if (!response.headersSent && !response.destroyed) answerPlain(response, 500, "processor-sim failed; see its log");
  }
}

function readBody(request: IncomingMessage): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    request.on("end", () => resolve(size > MAX_BODY_BYTES ? undefined : Buffer.concat(chunks).toString("utf8")));
    request.on("error", reject);
  });
}

function answerPlain(response: ServerResponse, status: number, text: string): void {
  response.writeHead(status, { "Content-Type": "text/plain" });
  response.end(text);
}
