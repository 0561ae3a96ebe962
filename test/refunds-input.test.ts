// POST /charges/:id/refunds refused before the database is touched: a path id that is not a
// UUID, a missing or malformed key, a bad body, the wrong media type, a body too large, no
// token. Each is a 4xx problem with nothing written, and the key stays usable.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { apiTestContext } from "../testkit/api.ts";
import { expectProblem, newCharge, postRefund, refundBody, written } from "../testkit/refunds.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("refunds_input");

const key = () => crypto.randomUUID();

describe("checked before the database: 4xx, nothing written", () => {
  test("a charge id in the path that is not a UUID → 400 invalid-id", async () => {
    const before = await written(db.sql);
    for (const id of ["not-a-uuid", "123", "8e03978e-40d5-43e8-bc93-6894a57f932", "8e03978e40d543e8bc936894a57f9324x"]) {
      await expectProblem(await postRefund(api, id, refundBody(100), { key: key() }), 400, "invalid-id");
    }
    expect(await written(db.sql)).toEqual(before);
  });

  test.each([
    ["missing", null],
    ["empty", ""],
    ["an empty string", '""'],
    ["an unterminated string", '"8e03978e-40d5-43e8-bc93-6894a57f9324'],
    ["a list", '"a", "b"'],
    ["over 255 characters", "k".repeat(256)],
    ["non-ASCII", "clé-1"],
  ])("key %s → 400 invalid-idempotency-key", async (_name, k) => {
    const chargeId = await newCharge(api, 1000);
    const before = await written(db.sql);
    await expectProblem(await postRefund(api, chargeId, refundBody(100), { key: k }), 400, "invalid-idempotency-key");
    expect(await written(db.sql)).toEqual(before);
  });

  test.each([
    ["a float", refundBody(1.5)],
    ["zero", refundBody(0)],
    ["negative", refundBody(-100)],
    ["too large", refundBody(2_147_483_648)],
    ["a string", refundBody("100")],
    ["missing", "{}"],
    ["an unknown field", JSON.stringify({ amountCents: 100, reason: "customer asked" })],
    ["a duplicate member", '{"amountCents":100,"amountCents":200}'],
    ["not JSON", "amountCents=100"],
    ["empty", ""],
  ])("body %s → 400 invalid-body; the key then works with a fixed body", async (_name, body) => {
    const chargeId = await newCharge(api, 1000);
    const k = key();
    const before = await written(db.sql);
    await expectProblem(await postRefund(api, chargeId, body, { key: k }), 400, "invalid-body");
    expect(await written(db.sql)).toEqual(before);
    expect((await postRefund(api, chargeId, refundBody(100), { key: k })).status).toBe(201);
  });

  test("a failing field is named in the problem", async () => {
    const chargeId = await newCharge(api, 1000);
    const problem = await expectProblem(await postRefund(api, chargeId, refundBody(0), { key: key() }), 400, "invalid-body");
    expect(JSON.stringify(problem.errors ?? problem.detail)).toContain("amountCents");
  });

  test("Content-Type not JSON → 415", async () => {
    const chargeId = await newCharge(api, 1000);
    const before = await written(db.sql);
    await expectProblem(await postRefund(api, chargeId, refundBody(100), { key: key(), contentType: "text/plain" }), 415, "unsupported-media-type");
    expect(await written(db.sql)).toEqual(before);
  });

  test("a body over 16 KiB → 413", async () => {
    const chargeId = await newCharge(api, 1000);
    const before = await written(db.sql);
    const big = JSON.stringify({ amountCents: 100, pad: "x".repeat(16 * 1024) });
    await expectProblem(await postRefund(api, chargeId, big, { key: key() }), 413, "body-too-large");
    expect(await written(db.sql)).toEqual(before);
  });

  test("no token, or a bad one → 401 with WWW-Authenticate, nothing written", async () => {
    const chargeId = await newCharge(api, 1000);
    const before = await written(db.sql);
    const none = await postRefund(api, chargeId, refundBody(100), { key: key(), tenant: null });
    await expectProblem(none, 401, "unauthorized");
    expect(none.headers.get("www-authenticate")).toBe("Bearer");
    const bad = await postRefund(api, chargeId, refundBody(100), { key: key(), headers: { authorization: "Bearer not.a.token" } });
    await expectProblem(bad, 401, "unauthorized");
    expect(bad.headers.get("www-authenticate")).toStartWith("Bearer");
    expect(await written(db.sql)).toEqual(before);
  });
});

