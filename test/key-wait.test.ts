// Prefer: wait=N (RFC 7240) on a request whose key is in flight: held for the holder's outcome
// and answered as the replay, with Preference-Applied; still in flight at the end, the 409 as
// without it. The holder's processor call is slowed at the simulator (latency), so the key is
// in flight for a known while; the waiter is in the holder's process (woken by its end) or in
// another API process on the same database (woken by the notify of the holder's commit).
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { postCharge } from "../testkit/api.ts";
import { waitUntil } from "../testkit/wait.ts";
import { chargeWith, keyState, paymentsOf, processorTestContext } from "../testkit/processor.ts";
import type { ApiProcess } from "../lib/api/start.ts";
import { preferredWait } from "../lib/api/schemas.ts";

setDefaultTimeout(60_000);

const p = await processorTestContext("key_wait", 5000);
const other = await p.startApi();
// Each processor call takes this long: the key stays in flight through create and confirm.
const LATENCY_MS = 1500;

/** A charge whose processor calls take LATENCY_MS, in flight (its key STARTED) when this resolves. */
async function inFlight(key: string, amountCents: number): Promise<{ first: Promise<Response> }> {
  p.sim.setFaults({ latencyMs: LATENCY_MS });
  const first = postCharge(p.api, chargeWith(amountCents), { key });
  await waitUntil(async () => (await keyState(p.db.sql, key))?.status === "STARTED", 10_000, "the first request's key STARTED");
  return { first };
}

async function expectReplayOf(first: Promise<Response>, waiter: Response, amountCents: number): Promise<void> {
  const original = await first;
  expect(original.status).toBe(201);
  const body = await original.text();
  expect(waiter.status).toBe(201);
  expect(waiter.headers.get("idempotent-replayed")).toBe("true");
  expect(await waiter.text()).toBe(body);
  const id = (JSON.parse(body) as { id: string; amountCents: number }).id;
  expect(paymentsOf(p.sim.ledger(), id)).toHaveLength(1);
  const [n] = await p.db.sql<{ n: number }[]>`select count(*)::int as n from charges where amount_cents = ${amountCents}`;
  expect(n!.n).toBe(1);
}

describe("a key in flight at the processor", () => {
  test.each([
    ["in the holder's process", () => p.api],
    ["in another API process (woken by the holder's notify)", () => other],
  ] as const)("Prefer: wait=5 %s: held, then the replay with Preference-Applied: wait=5", async (_, waiterApi: () => ApiProcess) => {
    const key = `order-${crypto.randomUUID()}`;
    const { first } = await inFlight(key, 3100);
    const waiter = await postCharge(waiterApi(), chargeWith(3100), { key, headers: { prefer: "wait=5" } });
    expect(waiter.headers.get("preference-applied")).toBe("wait=5");
    await expectReplayOf(first, waiter, 3100);
  });

  test("wait past the request timeout is capped by it (10 s less a second for the last read)", async () => {
    const key = `order-${crypto.randomUUID()}`;
    const { first } = await inFlight(key, 3200);
    const waiter = await postCharge(p.api, chargeWith(3200), { key, headers: { prefer: "respond-async, wait=600" } });
    expect(waiter.headers.get("preference-applied")).toBe("wait=9");
    await expectReplayOf(first, waiter, 3200);
  });

  test("still in flight when the wait ends: the 409 with Retry-After, and Preference-Applied", async () => {
    const key = `order-${crypto.randomUUID()}`;
    const { first } = await inFlight(key, 3300);
    // Create and confirm take LATENCY_MS each: a second's wait ends before them.
    const waiter = await postCharge(p.api, chargeWith(3300), { key, headers: { prefer: "wait=1" } });
    expect(waiter.status).toBe(409);
    expect(waiter.headers.get("retry-after")).toBe("1");
    expect(waiter.headers.get("preference-applied")).toBe("wait=1");
    expect((await first).status).toBe(201);
  });

  test("without the preference, or with one not understood (RFC 7240: ignored): the 409 at once; a wait that is not whole seconds: 400", async () => {
    const key = `order-${crypto.randomUUID()}`;
    const { first } = await inFlight(key, 3400);
    // wait=0 asks for no wait at all.
    for (const prefer of [undefined, "wait=0", "return=minimal", "respond-async"]) {
      const res = await postCharge(p.api, chargeWith(3400), { key, headers: prefer === undefined ? {} : { prefer } });
      expect(res.status).toBe(409);
      expect(res.headers.get("retry-after")).toBe("1");
      expect(res.headers.get("preference-applied")).toBeNull();
    }
    for (const prefer of ["wait=soon", "wait=-1", "respond-async, wait=1.5"]) {
      const res = await postCharge(p.api, chargeWith(3400), { key, headers: { prefer } });
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ type: "https://charges.example/problems/invalid-prefer" });
    }
    expect((await first).status).toBe(201);
  });
});

test("the Prefer parser: wait=N among other preferences, quoted or not; other preferences are no wait; a wait not in whole seconds is invalid", () => {
  expect(preferredWait("wait=10")).toEqual({ kind: "wait", seconds: 10 });
  expect(preferredWait('respond-async, WAIT = "3"')).toEqual({ kind: "wait", seconds: 3 });
  expect(preferredWait("handling=lenient, wait=2; x=y")).toEqual({ kind: "wait", seconds: 2 });
  for (const none of [null, "", "respond-async", "return=minimal", "waiting=3"]) expect(preferredWait(none)).toEqual({ kind: "none" });
  for (const bad of ["wait", "wait=", "wait=1.5", "wait=-1", "wait=abc", "wait=1234567"]) expect(preferredWait(bad).kind).toBe("invalid");
});

test("the client: after a 409 its next try sends Prefer: wait and ends as the replay in two tries; a client whose Prefer is stripped polls on Retry-After", async () => {
  const { ChargesClient } = await import("charges-outbox/client");
  const { tokenFor } = await import("../testkit/auth.ts");
  const run = async (strip: boolean): Promise<{ statuses: number[]; prefers: (string | null)[] }> => {
    const key = `order-${crypto.randomUUID()}`;
    const { first } = await inFlight(key, strip ? 3600 : 3500);
    const prefers: (string | null)[] = [];
    const statuses: number[] = [];
    const fetch = (url: string, init: RequestInit): Promise<Response> => {
      const headers = new Headers(init.headers);
      if (strip) headers.delete("prefer");
      prefers.push(headers.get("prefer"));
      return p.api.fetch(new Request(url, { ...init, headers }));
    };
    const client = new ChargesClient({ baseUrl: "http://localhost", token: () => tokenFor(), fetch, onTry: (t) => statuses.push(t.status) });
    const answer = await client.charges.create({ amountCents: strip ? 3600 : 3500, paymentMethod: "pm_card_visa" } as never, { idempotencyKey: key });
    expect(answer.replayed).toBe(true);
    expect((await first).status).toBe(201);
    return { statuses, prefers };
  };
  const waiting = await run(false);
  expect(waiting.statuses).toEqual([409, 201]);
  expect(waiting.prefers).toEqual([null, "wait=8"]);
  const polling = await run(true);
  expect(polling.statuses.at(-1)).toBe(201);
  expect(polling.statuses.length).toBeGreaterThan(2);
});
