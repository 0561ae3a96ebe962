// A resend keeps the request's identity. The API reaches Postgres through a TCP proxy that,
// once armed, lets the charge statement run and commit, then cuts the connection before a
// byte of the answer reaches the API: a connection lost during commit, deterministically.
// The resend finds the row its own first try wrote and answers it as the creation.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import net from "node:net";
import { startTelemetry } from "../lib/platform/telemetry.ts";
import { OUTBOX_CHANNEL } from "../lib/platform/wakeup.ts";
import { freshDatabase } from "../testkit/services.ts";
import { counts, postCharge, startTestApi } from "../testkit/api.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

interface CuttingProxy {
  readonly url: string;
  /** The next connection that sends `marker` is cut when its answer is complete; resolves then. */
  cutAfterAnswer(marker: string): Promise<void>;
  close(): void;
}

// Postgres backend messages: a type byte, then an int32 length that counts itself.
const BIND_COMPLETE = "2".charCodeAt(0);
const READY_FOR_QUERY = "Z".charCodeAt(0);

/**
 * Where the held answer stands. postgres.js first describes a new statement (Parse,
 * Describe, Flush) and binds and executes it once that answer is back, so the messages
 * before BindComplete are passed on (their length is returned); from BindComplete on
 * nothing is, and "executed" means ReadyForQuery followed: the statement ran and its
 * implicit transaction committed.
 */
function answerState(buffer: Buffer): { pass: number; executed: boolean } {
  let bound = false;
  let pass = 0;
  for (let at = 0; at + 5 <= buffer.length; ) {
    const end = at + 1 + buffer.readInt32BE(at + 1);
    if (end > buffer.length) break;
    if (buffer[at] === BIND_COMPLETE) bound = true;
    if (bound && buffer[at] === READY_FOR_QUERY) return { pass, executed: true };
    if (!bound) pass = end;
    at = end;
  }
  return { pass, executed: false };
}

async function cuttingProxy(target: URL): Promise<CuttingProxy> {
  let armed: { marker: string; done: () => void } | undefined;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => (sockets.delete(s), client.destroy(), upstream.destroy()));
    }
    let cutting: { held: Buffer; done: () => void } | undefined;
    client.on("data", (chunk: Buffer) => {
      if (armed && chunk.includes(armed.marker)) {
        cutting = { held: Buffer.alloc(0), done: armed.done };
        armed = undefined;
      }
      upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => {
      if (!cutting) return void client.write(chunk);
      // Nothing of the execution's answer is passed on; once it is complete, both sides
      // are cut.
      cutting.held = Buffer.concat([cutting.held, chunk]);
      const { pass, executed } = answerState(cutting.held);
      client.write(cutting.held.subarray(0, pass));
      cutting.held = cutting.held.subarray(pass);
      if (!executed) return;
      client.destroy();
      upstream.destroy();
      cutting.done();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  const url = new URL(target);
  url.hostname = "127.0.0.1";
  url.port = String(port);
  return {
    url: url.toString(),
    cutAfterAnswer: (marker) => new Promise<void>((done) => (armed = { marker, done })),
    close() {
      server.close();
      for (const s of sockets) s.destroy();
    },
  };
}

const db = await freshDatabase("api_resend");
const proxy = await cuttingProxy(new URL(db.url));
const telemetry = startTelemetry("charges-api-test", undefined, false);
const api = await startTestApi(proxy.url, {}, { meter: telemetry.provider.getMeter("charges") });
afterAll(async () => {
  proxy.close();
  await api.close();
  await telemetry.shutdown();
  await db.drop();
});

function outcomeCount(metrics: string, outcome: string): number {
  const line = metrics.split("\n").find((l) => l.startsWith("idempotency_requests_total{") && l.includes(`outcome="${outcome}"`));
  return line ? Number(line.split(" ").pop()) : 0;
}

test("a resend after the connection died behind a commit answers created, counts created and wakes the relay", async () => {
  let wakeUps = 0;
  const listening = await db.sql.listen(OUTBOX_CHANNEL, () => void wakeUps++);
  try {
    const cut = proxy.cutAfterAnswer("insert into charges");
    const res = await postCharge(api, '{"amountCents":1234}', { key: crypto.randomUUID() });
    await cut; // the fault did happen: the first try's answer never reached the API
    expect(res.status).toBe(201);
    expect(res.headers.get("idempotent-replayed")).toBeNull();
    const charge = (await res.json()) as { id: string; amountCents: number; createdAt: string };
    // One charge, the one the answer names, written by the first try with its own ids.
    expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
    const [row] = await db.sql<{ id: string; created_at: Date; aggregate_id: string }[]>`
      select c.id, c.created_at, o.aggregate_id from charges c join outbox o on o.aggregate_id = c.id`;
    expect(row!.id).toBe(charge.id);
    expect(row!.created_at.toISOString()).toBe(charge.createdAt);
    const metrics = await (await telemetry.scrape()).text();
    expect(outcomeCount(metrics, "created")).toBe(1);
    expect(outcomeCount(metrics, "replayed")).toBe(0);
    await waitUntil(() => wakeUps > 0, 10_000, "the relay's wake-up after the created charge");
  } finally {
    await listening.unlisten();
  }
});
