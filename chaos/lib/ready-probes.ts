// /readyz of each process asked over and over while a scenario runs, each answer kept with when
// it was asked and answered, so a scenario can tell what each said during a fault and that it
// answered in time (a client that gives up counts as unanswered).
import { sleep } from "../../testkit/wait.ts";

// Pacing between rounds of probes (a probe is one GET per process).
const EVERY_MS = 250;
// Far above /readyz's own bound (2 s): only a hang reaches it.
const CLIENT_TIMEOUT_MS = 15_000;

export interface ReadyAnswer {
  readonly status: number; // 0: no answer
  readonly body: Record<string, unknown>;
  readonly sentAt: number;
  readonly answeredAt: number;
}

export class ReadyProbes<Name extends string> {
  private readonly answers = new Map<Name, ReadyAnswer[]>();

  constructor(private readonly bases: Record<Name, string>) {
    for (const name of Object.keys(bases) as Name[]) this.answers.set(name, []);
  }

  /** Probes every process until `running()` turns false. */
  async run(running: () => boolean): Promise<void> {
    while (running()) {
      await Promise.all((Object.keys(this.bases) as Name[]).map((name) => this.probe(name)));
      await sleep(EVERY_MS);
    }
  }

  /** Whether `name` gave an answer `match` accepts, asked after `from` and answered before `to`. */
  saw(name: Name, from: number, match: (a: ReadyAnswer) => boolean, to = Number.POSITIVE_INFINITY): boolean {
    return (this.answers.get(name) ?? []).some((a) => a.sentAt > from && a.answeredAt < to && a.status !== 0 && match(a));
  }

  last(name: Name): ReadyAnswer | undefined {
    return this.answers.get(name)?.at(-1);
  }

  /** The longest any probe took, unanswered ones included (they took the client's timeout). */
  slowest(): number {
    return Math.max(0, ...[...this.answers.values()].flat().map((a) => a.answeredAt - a.sentAt));
  }

  unanswered(): number {
    return [...this.answers.values()].flat().filter((a) => a.status === 0).length;
  }

  private async probe(name: Name): Promise<void> {
    const sentAt = performance.now();
    let status = 0;
    let body: Record<string, unknown> = {};
    try {
      const r = await fetch(`${this.bases[name]}/readyz`, { signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS) });
      status = r.status;
      body = ((await r.json().catch(() => ({}))) ?? {}) as Record<string, unknown>;
    } catch {
      // no answer
    }
    this.answers.get(name)?.push({ status, body, sentAt, answeredAt: performance.now() });
  }
}
