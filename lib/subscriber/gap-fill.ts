// Filling a gap that lasted `fillAfterMs` from GET /charges/:id/events: each event not held goes
// through the inbox in its turn as if the broker had brought it, in its own transaction.
import { CHARGE, parseEnvelope } from "../charges/events.ts";
import { Closing, keepHandlerLetter, processEvent, type Processing, type Releaser } from "./process.ts";
import type { Report } from "./report.ts";
import { gapsToFill, type Gap } from "./sequence-sql.ts";
import type { GapFillApi, SequencedEvent } from "./types.ts";

const GAPS_PER_RUN = 200;
// Those asked lately included (passed over until their pause ends).
const GAPS_SCANNED = 2000;
// After a lost session many gaps age alike: one call after another would lose the race with the timeout.
const FILLS_AT_ONCE = 4;
// A gap not filled is asked again after a pause doubling up to this: a down API is not hammered.
const MAX_ASK_PAUSE_MS = 60_000;
const API_MIN_PAUSE_MS = 1000;
// Full batches follow at once up to this long; bounded, so the sweep's releases of overdue gaps still come.
const FILL_RUN_MAX_MS = 5000;
// The API answers within its own bound (5 s by default) or not at all.
const REQUEST_TIMEOUT_MS = 10_000;
// Of 500 events each: a longer gap is filled by the next asks.
const MAX_PAGES = 10;

export class GapFiller {
  // By charge: its place when asked (once it moves, the gap is a new one), when to ask again.
  private readonly asked = new Map<string, { readonly last: number; readonly nextAt: number; readonly pauseMs: number }>();
  private apiPausedUntil = 0;
  private apiPauseMs = 0;

  constructor(
    private readonly processing: Processing,
    private readonly releaser: Releaser,
    private readonly report: Report,
    private readonly api: GapFillApi,
    private readonly timeoutMs: number,
  ) {}

  async run(signal: AbortSignal): Promise<void> {
    const started = performance.now();
    for (;;) {
      // After a failed call the others would fail alike, each up to its timeout, holding up the sweep.
      if (performance.now() < this.apiPausedUntil) return;
      const asked = await this.runBatch(signal);
      if (asked < GAPS_PER_RUN || signal.aborted || performance.now() - started >= FILL_RUN_MAX_MS) return;
    }
  }

  // How many were asked.
  private async runBatch(signal: AbortSignal): Promise<number> {
    const { sql, consumer } = this.processing;
    const gaps = await gapsToFill(sql, consumer, CHARGE, this.api.fillAfterMs, this.timeoutMs, GAPS_SCANNED);
    this.forgetClosed(gaps);
    // Passed over here, not in the statement: those asked lately must not crowd out the others.
    const batch = gaps.filter((gap) => this.mayAsk(gap)).slice(0, GAPS_PER_RUN);
    for (const gap of batch) this.recordAsked(gap);
    const due = batch.values();
    let failed = false;
    const worker = async (): Promise<void> => {
      for (const gap of due) {
        if (signal.aborted || failed) return;
        if (!(await this.fill(gap, signal))) failed = true;
      }
    };
    await Promise.all(Array.from({ length: FILLS_AT_ONCE }, worker));
    this.apiPauseMs = failed ? Math.min(MAX_ASK_PAUSE_MS, Math.max(API_MIN_PAUSE_MS, this.apiPauseMs * 2)) : 0;
    if (failed) this.apiPausedUntil = performance.now() + this.apiPauseMs;
    return batch.length;
  }

  private mayAsk(gap: Gap): boolean {
    const asked = this.asked.get(gap.place.aggregateId);
    return asked === undefined || asked.last !== gap.last || performance.now() >= asked.nextAt;
  }

  // Only for the gaps a batch takes: one scanned but paused unasked could wait past the timeout.
  private recordAsked(gap: Gap): void {
    const key = gap.place.aggregateId;
    const asked = this.asked.get(key);
    const same = asked !== undefined && asked.last === gap.last;
    const pauseMs = same ? Math.min(MAX_ASK_PAUSE_MS, asked.pauseMs * 2) : Math.max(API_MIN_PAUSE_MS, this.api.fillAfterMs);
    this.asked.set(key, { last: gap.last, nextAt: performance.now() + pauseMs, pauseMs });
  }

  private forgetClosed(gaps: readonly Gap[]): void {
    const open = new Set(gaps.map((gap) => gap.place.aggregateId));
    for (const key of this.asked.keys()) if (!open.has(key)) this.asked.delete(key);
  }

  // false when the API did not answer.
  private async fill(gap: Gap, signal: AbortSignal): Promise<boolean> {
    let answer;
    try {
      answer = await fetchChargeEvents(this.api, gap.place.aggregateId, gap.last, signal);
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      // Closing: the call was cut, not refused.
      if (signal.aborted) throw new Closing();
      this.report.fillFailed(gap, error.message);
      return false;
    }
    if (answer.kind === "unknown") {
      this.report.notFilled(gap, "the API knows no such charge for the token's tenant");
      return true;
    }
    const held = new Set(gap.held);
    const missing = answer.events.filter(({ event }) => event.sequence > gap.last && !held.has(event.sequence));
    let filled = 0;
    for (const fetched of missing) if (await this.processFetched(gap, fetched)) filled += 1;
    const next = gap.last + 1;
    if (answer.events.some(({ event }) => event.sequence === next)) this.report.gapFilled(gap, filled);
    else this.report.notFilled(gap, `the API has no event ${next} (gone from the outbox after OUTBOX_RETENTION_SECONDS?)`);
    return true;
  }

  private async processFetched(gap: Gap, { event, payload }: FetchedEvent): Promise<boolean> {
    const topic = `${gap.topic.slice(0, gap.topic.lastIndexOf("/") + 1)}${event.type}`;
    try {
      const outcome = await processEvent(this.processing, { ordered: true, event, place: gap.place, topic, payload });
      await this.releaser.settled(outcome, event, topic, false, true);
      return outcome.kind === "processed";
    } catch (error) {
      if (error instanceof Closing) throw error;
      this.report.deadLettered(await keepHandlerLetter(this.processing, { eventId: event.id, topic, payload }, error));
      return false;
    }
  }
}

type FetchedEvent = { readonly event: SequencedEvent; readonly payload: string };

type ApiAnswer =
  | { readonly kind: "events"; readonly events: readonly FetchedEvent[] }
  /** 404: no such charge for the token's tenant (another tenant's, or gone). */
  | { readonly kind: "unknown" };

class ApiError extends Error {}

async function fetchChargeEvents(api: GapFillApi, chargeId: string, after: number, stop: AbortSignal): Promise<ApiAnswer> {
  const events: FetchedEvent[] = [];
  let path: string | undefined = `/charges/${encodeURIComponent(chargeId)}/events?after=${after}`;
  for (let page = 0; path !== undefined && page < MAX_PAGES; page++) {
    const response = await get(api, path, stop);
    if (response.status === 404 && page === 0) return { kind: "unknown" };
    if (response.status !== 200) throw new ApiError(`GET ${path} answered ${response.status}${await problemOf(response)}`);
    events.push(...eventsOf(await response.text(), chargeId, path));
    path = response.headers.get("link")?.match(/^<(\/[^>]*)>;\s*rel="next"$/)?.[1];
  }
  return { kind: "events", events };
}

async function get(api: GapFillApi, path: string, stop: AbortSignal): Promise<Response> {
  const fetchIt = api.fetch ?? ((url: string, init: RequestInit) => fetch(url, init));
  const headers = { accept: "application/json", authorization: `Bearer ${await api.token()}` };
  try {
    return await fetchIt(`${api.url}${path}`, { headers, signal: AbortSignal.any([stop, AbortSignal.timeout(REQUEST_TIMEOUT_MS)]) });
  } catch (error) {
    throw new ApiError(`GET ${path} failed: ${error instanceof Error ? error.message : String(error)}`);
  }
}

async function problemOf(response: Response): Promise<string> {
  const problem = (await response.json().catch(() => undefined)) as { detail?: unknown } | null | undefined;
  return typeof problem?.detail === "string" ? `: ${problem.detail}` : "";
}

function eventsOf(body: string, chargeId: string, path: string): FetchedEvent[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw new ApiError(`GET ${path} answered a body that is not JSON`);
  }
  const list = (parsed as { events?: unknown } | null)?.events;
  if (!Array.isArray(list)) throw new ApiError(`GET ${path} answered no events array`);
  return list.map((element: unknown) => {
    // The relay published the envelope with JSON.stringify: this is its payload's text again.
    const payload = JSON.stringify(element);
    const envelope = parseEnvelope(payload);
    // Not what the route answers: nothing is processed from it.
    if (envelope?.sequence === undefined || envelope.aggregateId !== chargeId) throw new ApiError(`GET ${path} answered an event that is not one of the charge's`);
    return { event: { ...envelope, sequence: envelope.sequence }, payload };
  });
}
