// The client's own options: a wrong baseUrl or token is the caller's bug, thrown at once with
// nothing sent, never retried as a network failure; no token at all is right for an API that
// takes none (AUTH_MODE=none), against a real API on real Postgres.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { ChargesClient, type TryReport } from "charges-outbox/client";
import { freshDatabase } from "../testkit/services.ts";
import { killAll, startEntrypoint } from "../testkit/processes.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("client_options");
const open = await startEntrypoint("api", { env: { DATABASE_URL: db.url, API_POOL_SIZE: "2", AUTH_MODE: "none" } });
afterAll(async () => {
  await killAll();
  await db.drop();
});

/** What a call throws, and how many tries it sent. */
async function thrown(make: (onTry: (t: TryReport) => void) => Promise<unknown>): Promise<{ error: unknown; tries: number }> {
  let tries = 0;
  const error = await make(() => (tries += 1)).then(() => undefined, (e: unknown) => e);
  return { error, tries };
}

test("with no token, against an API that takes none, a charge is created on the first try", async () => {
  const client = new ChargesClient({ baseUrl: open.base });
  const { charge, attempts } = await client.charges.create({ amountCents: 4900 });
  expect(attempts).toBe(1);
  const rows = await db.sql<{ tenant: string }[]>`select tenant from charges where id = ${charge.id}::uuid`;
  expect(rows.map((r) => r.tenant)).toEqual(["default"]);
});

test("a token function that throws fails the call at once, with its error as the cause and nothing sent", async () => {
  const bug = new Error("no session");
  const started = Date.now();
  const { error, tries } = await thrown((onTry) => new ChargesClient({ baseUrl: open.base, token: () => Promise.reject(bug), onTry }).charges.create({ amountCents: 100 }));
  expect(error).toBeInstanceOf(TypeError);
  expect((error as TypeError).message).toContain("token function threw (no session)");
  expect((error as TypeError).cause).toBe(bug);
  expect(tries).toBe(0);
  // Not the back-off of seven tries: the first retry alone would wait up to 100 ms, a deadline 30 s.
  expect(Date.now() - started).toBeLessThan(1000);
  expect(await db.sql`select 1 from charges where amount_cents = 100`).toHaveLength(0);
});

test("a token that is not one (wrong type, empty, spaces) fails at once", async () => {
  const notAFunction = { token: 42 } as unknown as { token: string };
  expect(() => new ChargesClient({ baseUrl: open.base, ...notAFunction })).toThrow(/token must be a string or a function/);
  expect(() => new ChargesClient({ baseUrl: open.base, token: "" })).toThrow(/an empty string/);
  expect(() => new ChargesClient({ baseUrl: open.base, token: "two words" })).toThrow(/bearer token/);
  const undefinedValue = () => undefined as unknown as string;
  const { error, tries } = await thrown((onTry) => new ChargesClient({ baseUrl: open.base, token: undefinedValue, onTry }).charges.get(crypto.randomUUID()));
  expect(String(error)).toContain("the token function's value must be a bearer token");
  expect(tries).toBe(0);
});

test("a bad baseUrl throws from the constructor, naming it", () => {
  for (const baseUrl of ["localhost:3000", "", "ftp://api.example", "http://api.example/?x=1", undefined]) {
    expect(() => new ChargesClient({ baseUrl } as unknown as { baseUrl: string })).toThrow(/baseUrl must/);
  }
  expect(() => new ChargesClient({ baseUrl: "http://api.example/prefix/" })).not.toThrow();
});

test("the network is still retried: a refused connection is tries until the deadline, not a throw at once", async () => {
  const { error, tries } = await thrown((onTry) =>
    new ChargesClient({ baseUrl: "http://127.0.0.1:9", backoff: { baseMs: 1, maxMs: 5 }, deadlineMs: 500, onTry }).charges.create({ amountCents: 100 }),
  );
  expect((error as { type?: string }).type).toBe("urn:charges-outbox:client:deadline-exceeded");
  expect(tries).toBeGreaterThan(1);
});
