// Strict JSON: duplicate member names and numbers that are not exact integers are 400s,
// judged on the body's text; the scanner's own rules, then the same rules through POST.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { ValidationError } from "elysia";
import { TypeCompiler } from "@sinclair/typebox/compiler";
import { apiTestContext, counts, postCharge } from "../testkit/api.ts";
import { authHeaders } from "../testkit/auth.ts";
import { judgeNumber, MAX_FAULTS, MAX_NESTING_DEPTH, parseStrictJson } from "../lib/api/strict-json.ts";
import { withFixedErrors } from "../lib/api/http/checks.ts";
import { ChargeBody } from "../lib/charges/charges.ts";
import { OPERATIONS } from "../lib/charges/index.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("api_json");

const zeros = (n: number) => "0".repeat(n);

describe("judgeNumber: the token's exact value, not its double", () => {
  test.each([
    "0", "-0", "1", "-1", "2147483647", "2147483648", "9007199254740991", "-9007199254740991",
    "1.0", "1e0", "1E+0", "4900.0", "49e2", "4.9e3", "4900e-0", "10e-1", "0.0", "0e999999999999999999999",
    `2147483647.${zeros(400)}`, `0.${zeros(400)}`,
  ])("%s is an integer", (token) => {
    expect(judgeNumber(token)).toBe("integer");
  });

  test.each([
    "2147483647.0000001", "4900.0000000000001", "1.5", "0.1", "1e-1", "4901e-2", "-0.5",
    `0.${zeros(400)}1`, `1e-${"9".repeat(30)}`,
  ])("%s is not an integer", (token) => {
    expect(judgeNumber(token)).toBe("fraction");
  });

  test.each([
    "9007199254740992", "-9007199254740992", "1e16", "1e400", `1${zeros(400)}`, "9".repeat(5000), `1e${"9".repeat(30)}`,
  ])("%s is out of range", (token) => {
    expect(judgeNumber(token)).toBe("out_of_range");
  });
});

describe("parseStrictJson", () => {
  test("a plain body is JSON.parse's value", () => {
    expect(parseStrictJson('{"amountCents":4900.0,"a":[1,{"b":null}]}')).toEqual({ ok: true, value: { amountCents: 4900, a: [1, { b: null }] } });
  });

  test.each([
    ["at the top", '{"amountCents":100,"amountCents":5000}', "amountCents"],
    ["with the same value", '{"amountCents":100,"amountCents":100}', "amountCents"],
    ["spelled with an escape", '{"amountCents":1,"amount\\u0043ents":2}', "amountCents"],
    ["nested", '{"amountCents":1,"meta":{"a":1,"b":{"c":1,"c":2}}}', "meta.b.c"],
    ["inside an array", '{"list":[{"x":1},{"y":1,"y":1}]}', "list.1.y"],
  ])("a duplicate member name %s is refused and named", (_name, text, field) => {
    expect(parseStrictJson(text)).toEqual({ ok: false, faults: [{ field, message: "duplicate member name" }] });
  });

  test("one name in sibling objects is no duplicate", () => {
    expect(parseStrictJson('{"a":{"x":1},"b":{"x":1},"c":[{"x":1},{"x":1}]}').ok).toBe(true);
  });

  test("a bad number is named with its text; many faults are capped", () => {
    expect(parseStrictJson('{"a":[1,2.5]}')).toEqual({ ok: false, faults: [{ field: "a.1", message: "must be an integer, got 2.5" }] });
    const many = parseStrictJson(`[${Array.from({ length: 50 }, () => "0.5").join(",")}]`);
    expect(many.ok === false && many.faults.length).toBe(10);
  });

  test("the one-integer-member shape (read without the scan) gives the same verdicts at its edges", () => {
    expect(parseStrictJson('{"amountCents":4900}')).toEqual({ ok: true, value: { amountCents: 4900 } });
    expect(parseStrictJson(' \n{ "amountCents" :\t-0 }\r\n')).toEqual({ ok: true, value: { amountCents: -0 } });
    expect(parseStrictJson(`{"amountCents":${"9".repeat(15)}}`)).toEqual({ ok: true, value: { amountCents: 999_999_999_999_999 } });
    // 16 digits: only the scan can tell a safe one from an unsafe one.
    expect(parseStrictJson('{"amountCents":9007199254740991}')).toEqual({ ok: true, value: { amountCents: 9007199254740991 } });
    expect(parseStrictJson('{"amountCents":9007199254740993}')).toEqual({ ok: false, faults: [{ field: "amountCents", message: "is out of range, got 9007199254740993" }] });
    expect(parseStrictJson('{"amountCents":49e2}')).toEqual({ ok: true, value: { amountCents: 4900 } });
    expect(parseStrictJson('{"amountCents":4900.5}')).toEqual({ ok: false, faults: [{ field: "amountCents", message: "must be an integer, got 4900.5" }] });
    expect(parseStrictJson('{"amount\\"Cents":1}')).toEqual({ ok: true, value: { 'amount"Cents': 1 } });
  });

  test("nesting is refused past MAX_NESTING_DEPTH on the text, before JSON.parse; brackets in strings do not count", () => {
    const deep = (n: number) => `${"[".repeat(n)}${"]".repeat(n)}`;
    expect(parseStrictJson(deep(MAX_NESTING_DEPTH)).ok).toBe(true);
    const refused = { ok: false as const, faults: [{ field: "(body)", message: `nested deeper than ${MAX_NESTING_DEPTH} levels` }] };
    expect(parseStrictJson(deep(MAX_NESTING_DEPTH + 1))).toEqual(refused);
    // Unbalanced: refused on depth all the same, never handed to JSON.parse.
    expect(parseStrictJson("[".repeat(MAX_NESTING_DEPTH + 1))).toEqual(refused);
    expect(parseStrictJson(`{"a":"${"[".repeat(100)}\\\"{{{"}`)).toEqual({ ok: true, value: { a: `${"[".repeat(100)}"{{{` } });
  });

  test("past MAX_FAULTS, faults are counted, not named", () => {
    const many = parseStrictJson(`[${Array.from({ length: 2000 }, () => "0.5").join(",")}]`);
    expect(many.ok === false && [many.faults.length, many.more]).toEqual([MAX_FAULTS, 1990]);
  });

  test("not JSON, trailing commas and comments stay syntax errors", () => {
    for (const text of ['{"a":', "", '{"a":1,}', '{"a":1 /* c */}', "01"]) {
      expect(parseStrictJson(text)).toEqual({ ok: false, faults: [{ field: "(body)", message: "not valid JSON" }] });
    }
  });
});

describe("POST /charges", () => {
  const key = () => crypto.randomUUID();

  async function expect400(text: string, field: string): Promise<void> {
    const k = key();
    const res = await postCharge(api, text, { key: k });
    expect(res.status).toBe(400);
    const problem = (await res.json()) as { type: string; detail: string; errors: { field: string; message: string }[] };
    expect(problem.type).toBe("https://charges.example/problems/invalid-body");
    expect(problem.errors.map((e) => e.field)).toContain(field);
    expect(problem.detail).toContain(field);
    expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
    // Nothing was written: the same key is free for a good body.
    expect((await postCharge(api, '{"amountCents":1}', { key: k })).status).toBe(201);
    await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
  }

  test.each([
    ["a duplicate amount", '{"amountCents":100,"amountCents":5000}', "amountCents"],
    ["a nested duplicate", '{"amountCents":100,"meta":{"a":1,"a":2}}', "meta.a"],
    ["2147483647.0000001", '{"amountCents":2147483647.0000001}', "amountCents"],
    ["4900.0000000000001", '{"amountCents":4900.0000000000001}', "amountCents"],
    ["2147483648", '{"amountCents":2147483648}', "amountCents"],
    ["0", '{"amountCents":0}', "amountCents"],
    ["-1", '{"amountCents":-1}', "amountCents"],
    ["a 400-digit integer", `{"amountCents":1${zeros(400)}}`, "amountCents"],
    ["a long fraction", `{"amountCents":1.${zeros(400)}1}`, "amountCents"],
  ])("%s → 400 naming the field, nothing written", async (_name, text, field) => {
    await expect400(text, field);
  });

  test.each([
    ["1", "1", 1],
    ["2147483647", "2147483647", 2147483647],
    ["1.0", "1.0", 1],
    ["1e0", "1e0", 1],
    ["49e2", "49e2", 4900],
    ["2147483647 with 400 zero decimals", `2147483647.${zeros(400)}`, 2147483647],
  ])("%s → 201 charging exactly that integer", async (_name, token, amount) => {
    const res = await postCharge(api, `{"amountCents":${token}}`, { key: key() });
    expect(res.status).toBe(201);
    expect(((await res.json()) as { amountCents: number }).amountCents).toBe(amount);
    const [row] = await db.sql<{ amount_cents: number }[]>`select amount_cents from charges`;
    expect(row!.amount_cents).toBe(amount);
  });

  test("a body nested as deep as the size limit allows → 400 naming the depth limit, nothing written", async () => {
    const depth = 8000;
    const res = await postCharge(api, `{"amountCents":${"[".repeat(depth)}${"]".repeat(depth)}}`, { key: key() });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ detail: `(body): nested deeper than ${MAX_NESTING_DEPTH} levels`, errors: [{ field: "(body)" }] });
    expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
  });

  test("a problem stays a few KiB: 2,000 floats, 1,500 unknown members, a 16,000-character name", async () => {
    const floats = `{"amountCents":[${Array.from({ length: 2000 }, (_, i) => `${i}.5`).join(",")}]}`;
    const members = `{"amountCents":1,${Array.from({ length: 1500 }, (_, i) => `"m${i}":0`).join(",")}}`;
    const name = `{"amountCents":1,"${"a".repeat(16_000)}":1}`;
    // Deep within the limit and wide: the schema's worst (Elysia's own error would format it all).
    const wide = `{"amountCents":${"[".repeat(31)}${Array.from({ length: 4000 }, () => "0").join(",")}${"]".repeat(31)}}`;
    for (const [body, more] of [[floats, "1990 more"], [members, "at least 100 more"], [name, undefined], [wide, undefined]] as const) {
      const res = await postCharge(api, body, { key: key() });
      expect(res.status).toBe(400);
      const text = await res.text();
      expect(text.length).toBeLessThan(4096);
      const problem = JSON.parse(text) as { detail: string; errors: { field: string }[] };
      expect(problem.errors.length).toBeLessThanOrEqual(MAX_FAULTS);
      for (const e of problem.errors) expect(e.field.length).toBeLessThanOrEqual(65);
      if (more) expect(problem.detail).toEndWith(`; and ${more}`);
    }
    expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
  });
});

describe("Elysia's refusal never formats what was sent, whatever NODE_ENV says", () => {
  // bun test runs with NODE_ENV=test: Elysia's development path, which formats the value it refused.
  const secret = "s3cr3t-".repeat(2000);
  test.each([
    ["an unknown member", { amountCents: 1, [secret]: secret }],
    ["a wrong type", { amountCents: secret }],
    ["a missing member", { currency: secret }],
    ["a union's miss", { amountCents: 1, capture: secret }],
    ["not an object", [secret]],
  ])("%s: the fixed words, nothing of the value", (_name, value) => {
    for (const schema of [ChargeBody, ...OPERATIONS.map((op) => op.body)]) {
      const check = TypeCompiler.Compile(withFixedErrors(schema));
      if (check.Check(value)) continue;
      const error = new ValidationError("body", check, value);
      expect(error.message).toBe("refused by the route's schema");
    }
  });

  test("the checks' order holds whichever Elysia runs first: body reading, ids, body schema, key, Prefer", async () => {
    const problem = async (path: string, body: string, headers: Record<string, string>) =>
      ((await (await api.fetch(new Request(`http://localhost${path}`, { method: "POST", body, headers: { ...(await authHeaders()), ...headers } }))).json()) as { type: string }).type.split("/").pop();
    const json = { "content-type": "application/json" };
    expect(await problem("/charges/nope/refunds", '{"amountCents":1,"amountCents":2}', json)).toBe("invalid-body");
    expect(await problem("/charges/nope/refunds", '{"amountCents":"x"}', { ...json, "idempotency-key": '"' })).toBe("invalid-id");
    expect(await problem("/charges", '{"amountCents":"x"}', json)).toBe("invalid-body");
    expect(await problem("/charges", "{}", { "content-type": "text/plain" })).toBe("unsupported-media-type");
    expect(await problem("/charges", '{"amountCents":1}', { ...json, prefer: "wait=soon" })).toBe("invalid-idempotency-key");
    expect(await problem("/charges", '{"amountCents":1}', { ...json, "idempotency-key": crypto.randomUUID(), prefer: "wait=soon" })).toBe("invalid-prefer");
    expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
  });
});
