// pathOf is new URL(url, base).pathname without the URL when the path is plain; it must agree
// with the URL parser on every input, plain or not (it routes the token check and the logs).
import { expect, test } from "bun:test";
import { pathOf } from "../lib/platform/runtime.ts";

const viaUrl = (url: string) => new URL(url, "http://localhost").pathname;

test.each([
  "http://127.0.0.1:3000/charges",
  "http://127.0.0.1:3000/charges/8e03978e-40d5-43e8-bc93-6894a57f9324?x=1#f",
  "/charges",
  "http://[::1]:3000/charges",
  "http://api/charges/../healthz",
  "http://api/charges/%2e%2e/healthz",
  "http://api/charges\\x",
  "http://a@b/charges",
  "http://h?x/charges",
  "//evil/charges",
  "/charges/a b",
  "http://api/openapi.json",
  "http://api",
])("%p", (url) => {
  expect(pathOf(url)).toBe(viaUrl(url));
});

test("agrees with the URL parser on 100,000 generated urls", () => {
  const alphabet = "/abc.%2e?#\\:@!$&'()*+,;=-_~ \"<>`{}|^[]é0";
  // A fixed-seed generator (mulberry32): the same inputs on every run.
  let seed = 0x5eed;
  const random = () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const mismatches: string[] = [];
  for (let i = 0; i < 25_000; i++) {
    let tail = "";
    for (let j = Math.floor(random() * 12); j > 0; j--) tail += alphabet[Math.floor(random() * alphabet.length)];
    for (const url of [`http://127.0.0.1:3000/${tail}`, `/${tail}`, tail, `http://h${tail}`]) {
      let expected: string;
      try {
        expected = viaUrl(url);
      } catch {
        continue;
      }
      if (pathOf(url) !== expected) mismatches.push(url);
    }
  }
  expect(mismatches).toEqual([]);
});
