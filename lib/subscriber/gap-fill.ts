// Filling a gap from the API: an aggregate whose next event has not come while later ones
// are held, for `fillAfterMs` (usually the predecessor is only late: another member of a share
// group has it, or the relay's chain is one PUBACK behind), is read from the API's
// GET /charges/:id/events?after=<last processed>. Each event it answers that is not held is
// processed through the inbox in its turn, exactly as if the broker had brought it (a
// duplicate of one processed meanwhile is dropped; the held events behind it follow in
// order), so the gap timeout skips only a gap the API could not fill either: the events are
// gone from the outbox (OUTBOX_RETENTION_SECONDS), the charge is another tenant's than the
// token's, or the API did not answer until the timeout.
// The call holds no transaction and no connection: the gaps are read first, then the API is
// asked, then each event is one transaction of its own.
import { CHARGE } from "../charges/events.ts";
import { describeDbError } from "../platform/db.ts";
import { keepDeadLetter } from "./dead-letter.ts";
import { ApiError, fetchChargeEvents, type FetchedEvent } from "./events-api.ts";
import { handlerAttempts, processEvent, type Processing } from "./process.ts";
import type { Releaser } from "./release.ts";
import type { Report } from "./report.ts";
import { Closing } from "./retry.ts";
import { gapsToFill, type Gap } from "./sequence-sql.ts";
import type { GapFillApi } from "./types.ts";

// Gaps asked about per sweep; the next sweep takes the rest.
const GAPS_PER_RUN = 200;
// Gaps read per sweep, those asked lately included (passed over until their pause ends).
const GAPS_SCANNED = 2000;
// Calls to the API at once. After a lost session a subscriber may find a gap in every charge
// it was told of meanwhile, all aged alike: one call after another, an API slowed by load
// (tens of milliseconds an answer) would fill them slower than the gap timeout runs out.
const FILLS_AT_ONCE = 4;
// After an answer that did not fill the gap, or a failed call, the same gap is asked again
// after a pause that doubles from fillAfterMs (a second at least) up to this: an API that is down is not asked
// every second, and one that answered is asked again now and then in case the events appear
// (an outbox restored from a backup), until the gap timeout.
const MAX_ASK_PAUSE_MS = 60_000;

// The first pause after a failed call (then doubling to MAX_ASK_PAUSE_MS).
const API_MIN_PAUSE_MS = 1000;
// A sweep that asked GAPS_PER_RUN gaps may have left more: it asks the next at once, for up to
// this long, rather than one batch a sweep interval, which after a lost session with thousands
// of gaps filled them slower than the gap timeout ran out (chaos 17). Bounded, so the sweep's
// releases of the gaps past their timeout still come.
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

  /** One batch: the gaps old enough, each asked unless it was lately, a few at once; how many were asked. */
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

  /** Whether the gap may be asked about now: not asked lately at the same place. */
  private mayAsk(gap: Gap): boolean {
    const asked = this.asked.get(gap.place.aggregateId);
    return asked === undefined || asked.last !== gap.last || performance.now() >= asked.nextAt;
  }

  /**
   * The gap is being asked: its next ask waits a pause that doubles while it stays at the same
   * place. Recorded only for the gaps a batch takes: recorded for every gap scanned, the ones
   * past the batch were paused without being asked, longer each sweep, and after a lost
   * session some waited past the gap timeout unasked (chaos 17).
   */
  private recordAsked(gap: Gap): void {
    const key = gap.place.aggregateId;
    const asked = this.asked.get(key);
    const same = asked !== undefined && asked.last === gap.last;
    const pauseMs = same ? Math.min(MAX_ASK_PAUSE_MS, asked.pauseMs * 2) : Math.max(API_MIN_PAUSE_MS, this.api.fillAfterMs);
    this.asked.set(key, { last: gap.last, nextAt: performance.now() + pauseMs, pauseMs });
  }

  /** A gap gone from the list was filled, released or skipped: forgotten. */
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
    const place = gap.place;
    try {
      const outcome = await processEvent(this.processing, { ordered: true, event, place, topic, payload });
      switch (outcome.kind) {
        case "processed":
        case "duplicate": {
          const duplicate = outcome.kind === "duplicate";
          if (!duplicate) this.report.counts.countGap("filled");
          this.report.delivered({ event, topic, duplicate, redelivered: false, held: false, gapSkipped: false, filled: true });
          if (outcome.follow) await this.releaser.release(outcome.follow);
          return !duplicate;
        }
        case "held":
          if (outcome.fresh) this.report.held(outcome.place, outcome.event, topic, outcome.expected);
          return false;
        case "late":
          this.report.late(outcome.place, outcome.event, outcome.last, outcome.letter);
          return false;
      }
    } catch (error) {
      if (error instanceof Closing) throw error;
      // The handler's budget is spent: kept as a dead letter, as an event from the broker would be.
      const letter = { eventId: event.id, consumer: place.consumer, topic, payload, error: describeDbError(error), attempts: handlerAttempts(this.processing) };
      await keepDeadLetter(this.processing, letter);
      this.report.deadLettered(letter);
      return false;
    }
  }
}
