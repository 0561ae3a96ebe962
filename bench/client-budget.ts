// `bun bench/client-budget.ts [rounds]`: the client's defaults under issue 39's two cases, as
// figures (bench/README.md, "The client's retry budget"). (1) 300 charge intents at once, 60 s
// deadlines, through the fault proxy losing 40 % of the tries (10 % reset, 30 % answers
// dropped after the commit, 10 % answered 3 s late) in front of a real api.ts: intents that
// failed, the share of tries that were retries, p50/p99 of an intent's total time; `rounds`
// rounds (3), each with its own seed. (2) 300 intents, 30 s deadlines, against a 503 to
// everything, a server dropping every connection and a refused port, at once: tries, retries'
// share, against the bound 2 × intents + the floor. BENCH_CLIENT_CHECKOUT=<dir> also runs
// another checkout's client (e.g. `git archive <commit> client | tar -x -C <dir>`) in each
// round of (1), alternated, and in (2). BENCH_CLIENT_LOSSY_ONLY=1 runs (1) alone.
import type { ChargesClient } from "charges-outbox/client";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { chargeIntents, quantile, refusingPort, startConnectionDropper, type IntentsRun } from "../testkit/client-load.ts";
import { seeded, sharesDecider, startFaultProxy } from "../testkit/http-fault-proxy.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { freshDatabase } from "./support.ts";

type ClientModule = typeof import("charges-outbox/client");

const INTENTS = 300;
const LOSSY_DEADLINE_MS = 60_000;
const TROUBLE_DEADLINE_MS = 30_000;
const FAULTS = { reset: 0.1, drop: 0.3, delay: 0.1 } as const;
const HELD_ANSWER_MS = 3_000;
const ROUNDS = Number(process.argv[2] ?? 3);
const CHECKOUT = process.env.BENCH_CLIENT_CHECKOUT;

const clients: [string, ClientModule][] = [["this client", await import("charges-outbox/client")]];
if (CHECKOUT) clients.push([`the client of ${CHECKOUT}`, (await import(`${CHECKOUT}/client/index.ts`)) as ClientModule]);

function defaults(module: ClientModule, baseUrl: string): ChargesClient {
  return new module.ChargesClient({ baseUrl, token: () => tokenFor() });
}

function describe(run: IntentsRun, withTimes: boolean): string {
  const failed = run.ends.filter((e) => !e.ok);
  const kinds = new Map<string, number>();
  for (const e of failed) if (!e.ok) kinds.set(e.error.type, (kinds.get(e.error.type) ?? 0) + 1);
  const times = run.ends.filter((e) => e.ok).map((e) => e.ms);
  const share = `${run.retries} retries of ${run.tries} tries (${((100 * run.retries) / run.tries).toFixed(1)} %)`;
  const p = withTimes && times.length > 0 ? `, p50 ${(quantile(times, 0.5) / 1000).toFixed(2)} s, p99 ${(quantile(times, 0.99) / 1000).toFixed(2)} s, max ${(Math.max(...times) / 1000).toFixed(2)} s` : "";
  return `${run.ends.length - failed.length} of ${run.ends.length} succeeded${failed.length ? ` (${[...kinds].map(([t, n]) => `${n} ${t}`).join(", ")})` : ""}; ${share}${p}`;
}

async function lossy(): Promise<void> {
  const db = await freshDatabase("client_budget");
  const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, LOG_LEVEL: "warn", ...authEnv() } });
  try {
    for (let round = 1; round <= ROUNDS; round += 1) {
      const order = round % 2 === 1 ? clients : [...clients].reverse();
      for (const [label, module] of order) {
        const proxy = await startFaultProxy({ upstreams: [api.port], decide: sharesDecider(FAULTS, seeded(390 + round)), delayMs: HELD_ANSWER_MS });
        try {
          const client = defaults(module, proxy.url);
          const run = await chargeIntents(client, INTENTS, LOSSY_DEADLINE_MS, module.ChargesApiError);
          const { waited } = client.budget.stats as { waited?: number };
          const waits = waited === undefined ? "" : `; ${waited} retries waited for a token`;
          console.log(`(1) round ${round}, ${label}: ${describe(run, true)}${waits}; proxy: ${proxy.counts.reset} reset, ${proxy.counts.drop} dropped, ${proxy.counts.delay} late`);
        } finally {
          await proxy.close();
        }
      }
    }
  } finally {
    await api.child.stop();
    await db.drop();
  }
}

async function trouble(): Promise<void> {
  const refused = await refusingPort();
  const unavailable = await startFaultProxy({ upstreams: [refused], decide: () => "unavailable", retryAfter: () => "1" });
  const dropper = await startConnectionDropper();
  try {
    const targets = { "503 to everything": unavailable.url, "connections dropped at once": `http://127.0.0.1:${dropper.port}`, "connections refused": `http://127.0.0.1:${refused}` };
    const runs = clients.flatMap(([label, module]) =>
      Object.entries(targets).map(async ([name, url]) => {
        const client = defaults(module, url);
        const run = await chargeIntents(client, INTENTS, TROUBLE_DEADLINE_MS, module.ChargesApiError);
        const o = client.budget.options;
        const floor = o.burst + o.perSecond * (TROUBLE_DEADLINE_MS / 1000);
        console.log(`(2) ${name}, ${label}: ${describe(run, false)}; bound 2 × ${INTENTS} + floor ${floor} = ${2 * INTENTS + floor}`);
      }),
    );
    await Promise.all(runs);
  } finally {
    await unavailable.close();
    await dropper.close();
  }
}

await lossy();
if (process.env.BENCH_CLIENT_LOSSY_ONLY === undefined) await trouble();
process.exit(0);
