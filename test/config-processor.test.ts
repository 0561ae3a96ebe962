// The payment processor's settings: defaults, validation naming the variable, and the key
// never shown (not in an error, not in the config printed or logged as JSON).
import { expect, test } from "bun:test";
import { inspect } from "node:util";
import { ConfigError, loadConfig } from "../lib/platform/config.ts";
import { runToExit } from "../testkit/processes.ts";
import { authEnv } from "../testkit/auth.ts";

const KEY = "sk_test_51Secret0123456789abcdef";

test("defaults: no processor, Stripe's API, a 10 s bound, a 1 h resolve window, usd", () => {
  expect(loadConfig({}).processor).toEqual({
    mode: "none",
    url: "https://api.stripe.com",
    key: undefined,
    timeoutMs: 10_000,
    resolveWindowSeconds: 3600,
    defaultCurrency: "usd",
  });
});

test("stripe mode takes the URL, the key, the bound, the window and the currency", () => {
  const processor = loadConfig({
    PAYMENT_PROCESSOR: " Stripe ",
    PAYMENT_PROCESSOR_URL: "http://127.0.0.1:12111",
    PAYMENT_PROCESSOR_KEY: KEY,
    PAYMENT_PROCESSOR_TIMEOUT_MS: "2500",
    PAYMENT_PROCESSOR_RESOLVE_WINDOW: "7200",
    DEFAULT_CURRENCY: "brl",
  }).processor;
  expect(processor).toMatchObject({ mode: "stripe", url: "http://127.0.0.1:12111", timeoutMs: 2500, resolveWindowSeconds: 7200, defaultCurrency: "brl" });
  expect(processor.key?.reveal()).toBe(KEY);
});

test.each([
  [{ PAYMENT_PROCESSOR: "paypal" }, "PAYMENT_PROCESSOR"],
  [{ PAYMENT_PROCESSOR: "stripe" }, "PAYMENT_PROCESSOR_KEY"],
  [{ PAYMENT_PROCESSOR_KEY: "has a space in it" }, "PAYMENT_PROCESSOR_KEY"],
  [{ PAYMENT_PROCESSOR_URL: "ftp://processor" }, "PAYMENT_PROCESSOR_URL"],
  [{ PAYMENT_PROCESSOR_TIMEOUT_MS: "0" }, "PAYMENT_PROCESSOR_TIMEOUT_MS"],
  // Past the processor's own 24-hour key retention a resumed call would be a new call.
  [{ PAYMENT_PROCESSOR_RESOLVE_WINDOW: "86400" }, "PAYMENT_PROCESSOR_RESOLVE_WINDOW"],
  [{ DEFAULT_CURRENCY: "USD" }, "DEFAULT_CURRENCY"],
  [{ DEFAULT_CURRENCY: "euro" }, "DEFAULT_CURRENCY"],
])("%p is refused with a message naming %s", (env, name) => {
  expect(() => loadConfig(env)).toThrow(ConfigError);
  expect(() => loadConfig(env)).toThrow(name);
});

test("the key is masked everywhere the config can be shown: JSON, String, inspect, and a refusal's message", () => {
  const config = loadConfig({ PAYMENT_PROCESSOR: "stripe", PAYMENT_PROCESSOR_KEY: KEY });
  expect(JSON.stringify(config)).not.toContain(KEY);
  expect(String(config.processor.key)).toBe("***");
  expect(inspect(config, { depth: 10 })).not.toContain(KEY);
  const bad = `${KEY} tail`;
  try {
    loadConfig({ PAYMENT_PROCESSOR_KEY: bad });
    throw new Error("expected a ConfigError");
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).not.toContain(KEY);
  }
});

test("bun api.ts with PAYMENT_PROCESSOR=stripe and no key exits 1 with one line naming it", async () => {
  const run = await runToExit(["bun", "api.ts"], { ...authEnv(), PAYMENT_PROCESSOR: "stripe", PORT: "0" });
  expect(run.code).toBe(1);
  expect(run.stderr.trim().split("\n")).toEqual([expect.stringContaining("PAYMENT_PROCESSOR_KEY")]);
});
