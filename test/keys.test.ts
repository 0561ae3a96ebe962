// Idempotency-Keys as real clients send them: derived from their own ids, quoted or bare, up
// to 255 visible ASCII characters; a UUID in any case is one key, anything else is exact.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { parseIdempotencyKey, MAX_KEY_CHARS } from "../lib/idempotency/keys.ts";
import { apiTestContext, counts, postCharge } from "../testkit/api.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("keys");
const body = '{"amountCents":4900}';

async function storedKeys(): Promise<string[]> {
  const rows = await db.sql<{ key: string }[]>`select key from idempotency_keys order by key`;
  return rows.map((r) => r.key);
}

describe("over HTTP", () => {
  test("order-123-payment bare and quoted are one key; ORDER-123-PAYMENT is another", async () => {
    const bare = await postCharge(api, body, { key: "order-123-payment" });
    const quoted = await postCharge(api, body, { key: '"order-123-payment"' });
    const upper = await postCharge(api, body, { key: "ORDER-123-PAYMENT" });
    expect(bare.status).toBe(201);
    expect(bare.headers.get("idempotent-replayed")).toBeNull();
    expect(quoted.status).toBe(201);
    expect(quoted.headers.get("idempotent-replayed")).toBe("true");
    expect(await quoted.text()).toBe(await bare.text());
    expect(upper.status).toBe(201);
    expect(upper.headers.get("idempotent-replayed")).toBeNull();
    expect(await storedKeys()).toEqual(["ORDER-123-PAYMENT", "order-123-payment"]);
    expect(await counts(db.sql)).toEqual({ charges: 2, outbox: 2, keys: 2 });
  });

  test("255 characters are accepted, bare and quoted alike; 256 are refused and write nothing", async () => {
    const longest = "k".repeat(MAX_KEY_CHARS);
    expect(MAX_KEY_CHARS).toBe(255);
    const first = await postCharge(api, body, { key: longest });
    expect(first.status).toBe(201);
    const again = await postCharge(api, body, { key: `"${longest}"` });
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    for (const key of [`${longest}k`, `"${longest}k"`]) {
      const res = await postCharge(api, body, { key });
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ type: "https://charges.example/problems/invalid-idempotency-key", status: 400 });
    }
    expect(await storedKeys()).toEqual([longest]);
    expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
  });

  test("keys derived from client ids are stored exactly as sent", async () => {
    const keys = [
      "req_8f2a1c_capture",
      "stripe-node-retry-8E03978E-40d5-43e8-bc93-6894a57f9324",
      "a:b/c=d+e~f!",
    ];
    for (const key of keys) expect((await postCharge(api, body, { key })).status).toBe(201);
    // A String may hold an escaped quote or backslash: the key is the unescaped text.
    expect((await postCharge(api, body, { key: '"say \\"hi\\" \\\\o/"'.replace(/ /g, "_") })).status).toBe(201);
    expect(await storedKeys()).toEqual([...keys, 'say_"hi"_\\o/'].sort());
  });

  test.each([
    ["empty, quoted", '""'],
    ["a space inside a String", '"order 123"'],
    ["an unbalanced quote", '"order-123'],
    ["a quote inside a bare key", 'order"123'],
    ["a list", '"order-1", "order-2"'],
    ["a bare list", "order-1,order-2"],
    ["a parameter", '"order-1";retry=2'],
    ["a bare semicolon", "order-1;retry=2"],
    ["non-ASCII", "commande-\u00e9t\u00e9"],
    ["non-ASCII in a String", '"commande-\u00e9t\u00e9"'],
    ["a control character in a String", '"order\u007f"'],
  ])("%s → 400 problem, nothing written", async (_name, key) => {
    const res = await postCharge(api, body, { key });
    expect(res.status).toBe(400);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(await res.json()).toMatchObject({ type: "https://charges.example/problems/invalid-idempotency-key", status: 400 });
    expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
  });
});

describe("parseIdempotencyKey", () => {
  test.each([
    ["order-12345-payment", "order-12345-payment"],
    ['"order-12345-payment"', "order-12345-payment"],
    ['  "order-12345-payment"  ', "order-12345-payment"],
    ["Order-12345-Payment", "Order-12345-Payment"],
    ["8E03978E-40D5-43E8-BC93-6894A57F9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"],
    ['"8E03978E-40D5-43E8-BC93-6894A57F9324"', "8e03978e-40d5-43e8-bc93-6894a57f9324"],
    // Not a hyphenated UUID: compared exactly, case kept.
    ["8E03978E40D543E8BC936894A57F9324", "8E03978E40D543E8BC936894A57F9324"],
    ["x", "x"],
    ['"a\\\\b"', "a\\b"],
  ])("%p is the key %p", (header, key) => {
    expect(parseIdempotencyKey(header)).toEqual({ ok: true, key });
  });

  test.each([[null], [""], ["   "], ['""'], ['"a b"'], ['"a'], ['a"'], ["a,b"], ["a;b"], ['"a";b=1'], ['("a")'], ["caf\u00e9"], ['"\t"']])(
    "%p is refused",
    (header) => {
      const parsed = parseIdempotencyKey(header);
      expect(parsed.ok).toBe(false);
      if (!parsed.ok) expect(parsed.reason).toContain("Idempotency-Key");
    },
  );
});
