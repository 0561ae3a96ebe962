// Filling a gap from the API. Usually a missing predecessor is only late (another share-group
// member has it, or the relay is one PUBACK behind), so a gap waits `fillAfterMs`, then GET
// /charges/:id/events?after=<last> is read and each event not held goes through the inbox in
// its turn, as if the broker had brought it. The gap timeout then skips only what the API could
// not fill either. The call holds no transaction or connection: gaps are read, the API asked,
// then each event is its own transaction.
import { CHARGE } from "../charges/events.ts";
import { keepHandlerLetter } from "./dead-letter.ts";
import { ApiError, fetchChargeEvents, type FetchedEvent } from "./events-api.ts";
import { processEvent, type Processing } from "./process.ts";
import type { Releaser } from "./release.ts";
import type { Report } from "./report.ts";
import { Closing } from "./retry.ts";
import { gapsToFill, type Gap } from "./sequence-sql.ts";
import type { GapFillApi } from "./types.ts";

// Gaps asked about per sweep; the next sweep takes the rest.
const GAPS_PER_RUN = 200;
// Gaps read per sweep, those asked lately included (passed over until their pause ends).
const GAPS_SCANNED = 2000;
// Calls to the API at once: after a lost session every charge told of meanwhile may have a gap,
// all aged alike, and one call after another would fill them slower than the gap timeout runs out.
const FILLS_AT_ONCE = 4;
// After an answer that did not fill the gap, or a failed call, the gap is asked again after a
// pause doubling from fillAfterMs (API_MIN_PAUSE_MS at least) up to this: an API that is down is
// not hammered, and one that answered is asked now and then in case the events appear (an outbox
// restored from a backup), until the gap timeout.
const MAX_ASK_PAUSE_MS = 60_000;

const API_MIN_PAUSE_MS = 1000;
// A sweep that filled GAPS_PER_RUN gaps asks the next batch at once, up to this long, rather
// than one batch a sweep interval, so that thousands of gaps after a lost session fill before
// the gap timeout runs out. Bounded, so the sweep's releases of overdue gaps still come.
const FILL_RUN_MAX_MS = 5000;

interface Asked {
  /** The aggregate's place when it was asked: once it moves, the gap is a new one. */
  readonly last: number;
  readonly nextAt: number;
  readonly pauseMs: number;
}

export class GapFiller {
  private readonly asked = new Map<string, Asked>();
  private apiPausedUntil = 0;
  private apiPauseMs = 0;

  constructor(
    private readonly processing: Processing,
    private readonly releaser: Releaser,
    private readonly report: Report,
    private readonly api: GapFillApi,
    private readonly timeoutMs: number,
  ) {}

  /** One sweep's fills: batches of the gaps old enough while they come full, for FILL_RUN_MAX_MS at most. */
  async run(signal: AbortSignal): Promise<void> {
    const started = performance.now();
    for (;;) {
      // After a failed call the API is left alone for a while: the other gaps' calls would fail
      // alike, each up to its timeout, and hold up the sweep's releases behind them.
      if (performance.now() < this.apiPausedUntil) return;
      const asked = await this.runBatch(signal);
      if (asked < GAPS_PER_RUN || signal.aborted || performance.now() - started >= FILL_RUN_MAX_MS) return;
    }
  }

  /** One batch of the gaps old enough, a few at once; how many were asked. */
  private async runBatch(signal: AbortSignal): Promise<number> {
    const { sql, consumer } = this.processing;
    const gaps = await gapsToFill(sql, consumer, CHARGE, this.api.fillAfterMs, this.timeoutMs, GAPS_SCANNED);
    this.forgetClosed(gaps);
    // Those asked lately are passed over here, not in the statement: they must not crowd out the others.
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
    if (!failed) this.apiPauseMs = 0;
    else {
      this.apiPauseMs = Math.min(MAX_ASK_PAUSE_MS, Math.max(API_MIN_PAUSE_MS, this.apiPauseMs * 2));
      this.apiPausedUntil = performance.now() + this.apiPauseMs;
    }
    return batch.length;
  }

  private mayAsk(gap: Gap): boolean {
    const asked = this.asked.get(gap.place.aggregateId);
    return asked === undefined || asked.last !== gap.last || performance.now() >= asked.nextAt;
  }

  /**
   * Its next ask waits a pause that doubles while the gap stays at the same place. Recorded only
   * for the gaps a batch takes: a gap scanned but not taken must not be paused unasked, or after
   * a lost session some would wait past the gap timeout.
   */
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

  /** Asks the API for the gap and processes what it answers; false when the API did not answer. */
  private async fill(gap: Gap, signal: AbortSignal): Promise<boolean> {
    let answer;
    try {
      answer = await fetchChargeEvents(this.api, gap.place.aggregateId, gap.last, signal);
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      // The subscriber is closing: the call was cut, not refused.
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

  /** One event read from the API, through the inbox in its turn; whether the handler ran for it. */
  private async processFetched(gap: Gap, { event, payload }: FetchedEvent): Promise<boolean> {
    // The topic the broker would have brought it on: the held event's, with this event's type.
    const topic = `${gap.topic.slice(0, gap.topic.lastIndexOf("/") + 1)}${event.type}`;
    try {
      const outcome = await processEvent(this.processing, { ordered: true, event, place: gap.place, topic, payload });
      await this.releaser.settled(outcome, event, topic, false, true);
      return outcome.kind === "processed";
    } catch (error) {
      if (error instanceof Closing) throw error;
      // The handler's budget is spent: kept as a dead letter, as an event from the broker would be.
      this.report.deadLettered(await keepHandlerLetter(this.processing, { eventId: event.id, topic, payload }, error));
      return false;
    }
  }
}
