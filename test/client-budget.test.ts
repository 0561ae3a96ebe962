// Issue 39 (2): the retry budget still protects a server in trouble. Nothing succeeds, so the
// budget earns no token and the retries get only its floor (client/budget.ts): 300 intents
// over their 30 s send at most twice as many tries as intents plus the floor (burst +
// perSecond × 30 s), whether every answer is a 503 (a load balancer with no upstream, here the
// fault proxy's own, Retry-After: 1), every connection is accepted and dropped at once, or the
// port refuses connections. Each intent then ends at its deadline, retryable, with its key. The
// three run at once, each with its own client (its own budget), default options.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { ChargesClient, CLIENT_PROBLEM } from "charges-outbox/client";
import { tokenFor } from "../testkit/auth.ts";
import { chargeIntents, refusingPort, startConnectionDropper, type IntentsRun } from "../testkit/client-load.ts";
import { startFaultProxy } from "../testkit/http-fault-proxy.ts";

const INTENTS = 300;
const DEADLINE_MS = 30_000;
// The default back-off's ceiling: a call ends when its next wait would pass the deadline, so
// at most this long before it.
const MAX_WAIT_MS = 5_000;

setDefaultTimeout(3 * DEADLINE_MS);

const refused = await refusingPort();
const unavailable = await startFaultProxy({ upstreams: [refused], decide: () => "unavailable", retryAfter: () => "1" });
const dropper = await startConnectionDropper();

afterAll(async () => {
  await unavailable.close();
  await dropper.close();
});

interface Trouble {
  readonly client: ChargesClient;
  readonly run: Promise<IntentsRun>;
}

function inTrouble(baseUrl: string): Trouble {
  const client = new ChargesClient({ baseUrl, token: () => tokenFor() });
  return { client, run: chargeIntents(client, INTENTS, DEADLINE_MS) };
}

// Started together: the three outages overlap in time, so the test takes one deadline, not three.
const cases = {
  "503 to everything": inTrouble(unavailable.url),
  "every connection accepted and dropped at once": inTrouble(`http://127.0.0.1:${dropper.port}`),
  "connections refused": inTrouble(`http://127.0.0.1:${refused}`),
};

/** The bound the issue sets: twice as many tries as intents, plus the budget's documented floor. */
function bound(client: ChargesClient): number {
  const { burst, perSecond } = client.budget.options;
  return 2 * INTENTS + burst + perSecond * (DEADLINE_MS / 1000);
}

for (const [name, trouble] of Object.entries(cases)) {
  test(`${name}: at most 2 × intents + the floor in tries; each intent ends at its deadline, retryable, with its key`, async () => {
    const run = await trouble.run;
    expect(run.ends.filter((e) => e.ok).length).toBe(0);
    expect(run.tries).toBeLessThanOrEqual(bound(trouble.client));
    expect(trouble.client.budget.stats).toMatchObject({ granted: run.retries, successes: 0, waiting: 0 });
    const early = run.ends.filter((e) => e.ms < DEADLINE_MS - MAX_WAIT_MS);
    expect(early.map((e) => e.ms)).toEqual([]);
    for (const end of run.ends) {
      if (end.ok) continue;
      expect(end.error.retryable).toBe(true);
      expect(end.error.idempotencyKey).toMatch(/^[0-9a-f-]{36}$/);
      // The last answer's problem when there was one (the 503), else the deadline's.
      expect(end.error.type).toBe(name === "503 to everything" ? "about:blank" : CLIENT_PROBLEM.deadline);
    }
    console.log(`  ${name}: ${run.tries} tries for ${INTENTS} intents, ${run.retries} retries (${((100 * run.retries) / run.tries).toFixed(1)} % of tries); bound ${bound(trouble.client)}`);
  });
}

test("what reached the servers is what the clients counted (no hidden resend): the proxy's requests, the dropper's connections", async () => {
  const [answered, dropped] = await Promise.all([cases["503 to everything"].run, cases["every connection accepted and dropped at once"].run]);
  expect(unavailable.counts.requests).toBe(answered.tries);
  expect(dropper.accepted()).toBe(dropped.tries);
});
