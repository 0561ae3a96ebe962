// ChargesClient: typed calls to the API (types generated from its OpenAPI document, see
// client/openapi.d.ts) with the retry policy of client/send.ts. One intent, one key: `create`
// makes its key once, or takes the caller's or the key store's, and serializes the body once.
import { CLIENT_PROBLEM, ChargesApiError } from "./errors.ts";
import { requestHash, type KeyStore } from "./key-store.ts";
import type { paths } from "./openapi.d.ts";
import { RetryBudget } from "./budget.ts";
import type { BackoffOptions, RetryBudgetOptions } from "./policy.ts";
import { checkedBaseUrl, tokenSource } from "./options.ts";
import { parseObject, problemError, send, type Exchange, type FetchLike, type Transport, type TryReport } from "./send.ts";

// Taken by route and status, not by schema name: the routes are the contract (SPEC), the
// names of the document's components are the server's choice.
type JsonRequest<Op> = Op extends { requestBody?: { content: { "application/json": infer B } } } ? B : never;
type JsonAnswer<Op, Status extends number> = Op extends { responses: { [S in Status]: { content: { "application/json": infer R } } } } ? R : never;

export type ChargeBody = JsonRequest<paths["/charges"]["post"]>;
export type Charge = JsonAnswer<paths["/charges"]["post"], 201>;
export type ChargeView = JsonAnswer<paths["/charges/{id}"]["get"], 200>;
/** One event of a charge, the envelope the broker carried (GET /charges/:id/events). */
export type ChargeEvent = JsonAnswer<paths["/charges/{id}/events"]["get"], 200>["events"][number];
export type RefundBody = JsonRequest<paths["/charges/{id}/refunds"]["post"]>;
export type Refund = JsonAnswer<paths["/charges/{id}/refunds"]["post"], 201>;
export type KeyState = JsonAnswer<paths["/charges/idempotency-key"]["get"], 200>;
export type CaptureBody = JsonRequest<paths["/charges/{id}/capture"]["post"]>;

// A try that has no answer after this long is abandoned and sent again with the same key.
const DEFAULT_PER_TRY_TIMEOUT_MS = 10_000;
// How long one call may take, tries and waits included, unless the call says otherwise.
const DEFAULT_DEADLINE_MS = 30_000;
// The first retry waits up to 100 ms, doubling to at most 5 s (full jitter below that).
const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 100, maxMs: 5_000 };
// Retries of one client (client/budget.ts): each success pays for one retry, so a network
// that loses up to half the tries pays its own retries (0.67 per success at 40 % lost); 50 at
// once (a start of 300 calls that lose 40 % sends 120 retries while successes pay them back);
// 1 per second when nothing succeeds. The floor an outage gets is burst + 1/s: 80 over 30 s.
const DEFAULT_BUDGET: RetryBudgetOptions = { burst: 50, perSecond: 1, perSuccess: 1 };

export interface ChargesClientOptions {
  /** The API's origin, e.g. "https://api.example" (a path prefix is kept). */
  readonly baseUrl: string;
  /**
   * The bearer token, or a function that returns the current one (asked before every try).
   * None for an API that takes none (AUTH_MODE=none). A function that throws, or returns
   * something that is not a token, is the caller's bug: the call throws at once, unsent.
   */
  readonly token?: string | (() => string | Promise<string>) | undefined;
  /** A fetch of your own (a test's, a proxy's); the global one by default. */
  readonly fetch?: FetchLike;
  readonly perTryTimeoutMs?: number;
  /** The default deadline of a call, in ms from its start. */
  readonly deadlineMs?: number;
  readonly backoff?: BackoffOptions;
  readonly retryBudget?: RetryBudgetOptions;
  /** Where intents' keys are kept (CallOptions.intentId); none by default. */
  readonly keyStore?: KeyStore;
  /** Called after every try of every call. */
  readonly onTry?: (report: TryReport) => void;
}

export interface CallOptions {
  readonly deadlineMs?: number;
  readonly signal?: AbortSignal;
  readonly onTry?: (report: TryReport) => void;
}

export interface CreateOptions extends CallOptions {
  /** The key to use; by default one is made (crypto.randomUUID) or taken from the key store. */
  readonly idempotencyKey?: string;
  /** With the client's keyStore: the caller's id of this intent, so a restart reuses its key. */
  readonly intentId?: string;
}

export interface Created {
  /** Whether the API replayed the answer it stored under the key (an earlier try had succeeded). */
  readonly replayed: boolean;
  /** Tries sent, this answer's included. */
  readonly attempts: number;
  readonly idempotencyKey: string;
}

export class ChargesClient {
  readonly #base: string;
  readonly #transport: Transport;
  readonly #deadlineMs: number;
  readonly #store: KeyStore | undefined;
  /** The retry budget this client's calls share (its stats show retries granted and refused). */
  readonly budget: RetryBudget;

  readonly charges = {
    create: (body: ChargeBody, options: CreateOptions = {}): Promise<Created & { charge: Charge }> =>
      this.#create("/charges", body, options).then(({ value, ...rest }) => ({ charge: value as Charge, ...rest })),
    get: async (id: string, options: CallOptions = {}): Promise<ChargeView> => {
      const plan = { method: "GET", url: this.#url(`/charges/${encodeURIComponent(id)}`), headers: { accept: "application/json" } } as const;
      const { exchange, attempts } = await send(this.#transport, plan, this.#limits(options));
      return answerOf(exchange, undefined, attempts) as ChargeView;
    },
    /** Captures an authorized charge ("capture": "manual"): all of it, or `amountCents` of it (the rest released). */
    capture: (id: string, body: CaptureBody = {}, options: CreateOptions = {}): Promise<Created & { charge: Charge }> =>
      this.#create(`/charges/${encodeURIComponent(id)}/capture`, body, options).then(({ value, ...rest }) => ({ charge: value as Charge, ...rest })),
    /** Cancels an authorized charge ("capture": "manual"): its authorization released. */
    cancel: (id: string, options: CreateOptions = {}): Promise<Created & { charge: Charge }> =>
      this.#create(`/charges/${encodeURIComponent(id)}/cancel`, {}, options).then(({ value, ...rest }) => ({ charge: value as Charge, ...rest })),
    /**
     * The charge's events after sequence `after` (default 0: all), in sequence order, as the
     * broker carried them, while the API's outbox keeps them; every page, one call each.
     */
    events: async (id: string, options: CallOptions & { readonly after?: number } = {}): Promise<ChargeEvent[]> => {
      const events: ChargeEvent[] = [];
      let path: string | undefined = `/charges/${encodeURIComponent(id)}/events?after=${options.after ?? 0}`;
      while (path !== undefined) {
        const plan = { method: "GET", url: this.#url(path), headers: { accept: "application/json" } } as const;
        const { exchange, attempts } = await send(this.#transport, plan, this.#limits(options));
        events.push(...eventsOf(exchange, attempts));
        path = nextPage(exchange.headers.get("link"));
      }
      return events;
    },
  };

  readonly refunds = {
    create: (chargeId: string, body: RefundBody, options: CreateOptions = {}): Promise<Created & { refund: Refund }> =>
      this.#create(`/charges/${encodeURIComponent(chargeId)}/refunds`, body, options).then(({ value, ...rest }) => ({ refund: value as Refund, ...rest })),
  };

  readonly keys = {
    /** What became of `idempotencyKey`, per operation: in_flight, completed, parked, expired or unknown. */
    get: async (idempotencyKey: string, options: CallOptions = {}): Promise<KeyState> => {
      const headers = { accept: "application/json", "idempotency-key": sfString(idempotencyKey) };
      const plan = { method: "GET", url: this.#url("/charges/idempotency-key"), headers } as const;
      const { exchange, attempts } = await send(this.#transport, plan, this.#limits(options));
      const value = parseObject(exchange.text);
      if (exchange.status === 200 && Array.isArray(value?.operations)) return value as unknown as KeyState;
      if (exchange.status !== 200) throw problemError(exchange, idempotencyKey, attempts, false);
      throw new ChargesApiError({ type: CLIENT_PROBLEM.unexpected, status: 200, detail: "a 200 whose body is not a key's state", idempotencyKey, retryable: false, attempts });
    },
  };

  /** Throws TypeError at once when the options themselves are wrong (client/options.ts). */
  constructor(options: ChargesClientOptions) {
    this.#base = checkedBaseUrl(options?.baseUrl);
    this.budget = new RetryBudget(options.retryBudget ?? DEFAULT_BUDGET);
    this.#transport = {
      fetch: options.fetch ?? ((url, init) => fetch(url, init)),
      token: tokenSource(options.token),
      perTryTimeoutMs: options.perTryTimeoutMs ?? DEFAULT_PER_TRY_TIMEOUT_MS,
      backoff: options.backoff ?? DEFAULT_BACKOFF,
      budget: this.budget,
      random: Math.random,
      onTry: options.onTry,
    };
    this.#deadlineMs = options.deadlineMs ?? DEFAULT_DEADLINE_MS;
    this.#store = options.keyStore;
  }

  async #create(path: string, body: object, options: CreateOptions): Promise<Created & { value: unknown }> {
    // Serialized once: every try sends these bytes, so every try is the same request.
    const bytes = new TextEncoder().encode(JSON.stringify(body));
    const key = await this.#keyFor(path, bytes, options);
    const headers = { "content-type": "application/json", accept: "application/json", "idempotency-key": sfString(key) };
    const plan = { method: "POST", url: this.#url(path), headers, body: bytes, idempotencyKey: key } as const;
    const { exchange, attempts } = await send(this.#transport, plan, this.#limits(options));
    const value = answerOf(exchange, key, attempts);
    return { value, replayed: exchange.headers.get("idempotent-replayed") === "true", attempts, idempotencyKey: key };
  }

  /** The intent's key: the store's when it has the intent (same request only), else the caller's or a new one. */
  async #keyFor(path: string, bytes: Uint8Array, options: CreateOptions): Promise<string> {
    if (options.intentId !== undefined && this.#store === undefined) {
      // A bug in the caller, not an outcome: without a store the intent would not survive a restart.
      throw new TypeError("ChargesClient: intentId needs the client's keyStore option");
    }
    if (options.intentId === undefined || this.#store === undefined) return options.idempotencyKey ?? crypto.randomUUID();
    const hash = await requestHash("POST", path, bytes);
    const known = await this.#store.get(options.intentId);
    if (known === undefined) {
      const idempotencyKey = options.idempotencyKey ?? crypto.randomUUID();
      await this.#store.set(options.intentId, { idempotencyKey, requestHash: hash, createdAt: Date.now() });
      return idempotencyKey;
    }
    const otherKey = options.idempotencyKey !== undefined && options.idempotencyKey !== known.idempotencyKey;
    if (known.requestHash !== hash || otherKey) {
      throw new ChargesApiError({
        type: CLIENT_PROBLEM.intentConflict,
        status: 0,
        detail: `intent ${JSON.stringify(options.intentId)} was recorded with ${otherKey ? "another key" : "another request"}; nothing was sent`,
        idempotencyKey: known.idempotencyKey,
        retryable: false,
        attempts: 0,
      });
    }
    return known.idempotencyKey;
  }

  #limits(options: CallOptions): { deadline: number; signal?: AbortSignal; onTry?: (report: TryReport) => void } {
    return { deadline: Date.now() + (options.deadlineMs ?? this.#deadlineMs), signal: options.signal, onTry: options.onTry };
  }

  #url(path: string): string {
    return `${this.#base}${path}`;
  }
}

/** The value of a 2xx answer; any other final answer, or a body that is not a JSON object, throws. */
function answerOf(exchange: Exchange, key: string | undefined, attempts: number): unknown {
  if (exchange.status < 200 || exchange.status > 299) throw problemError(exchange, key, attempts, false);
  const value = parseObject(exchange.text);
  if (value !== undefined && typeof value.id === "string") return value;
  throw new ChargesApiError({
    type: CLIENT_PROBLEM.unexpected,
    status: exchange.status,
    detail: `a ${exchange.status} whose body is not the API's JSON object`,
    idempotencyKey: key,
    retryable: false,
    attempts,
  });
}

/** The events of a 200 of GET /charges/:id/events; any other answer throws as answerOf does. */
function eventsOf(exchange: Exchange, attempts: number): ChargeEvent[] {
  if (exchange.status < 200 || exchange.status > 299) throw problemError(exchange, undefined, attempts, false);
  const events = parseObject(exchange.text)?.events;
  if (Array.isArray(events)) return events as ChargeEvent[];
  throw new ChargesApiError({ type: CLIENT_PROBLEM.unexpected, status: exchange.status, detail: `a ${exchange.status} without the API's events`, retryable: false, attempts });
}

/** The path of a Link rel="next" (the API writes one, a path with its query), if any. */
function nextPage(link: string | null): string | undefined {
  return link?.match(/^<(\/[^>]*)>;\s*rel="next"$/)?.[1];
}

/** The key as an RFC 9651 String, the header's canonical form. */
function sfString(key: string): string {
  return `"${key.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}
