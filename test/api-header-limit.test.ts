// Request headers over Bun's limit are answered by Bun itself, before the API's fetch handler
// runs: a 431 without a body, and the connection closed, with nothing written. The API cannot
// add a problem document to that answer (docs/api.md says so); this test notices the day a Bun
// upgrade changes either half, the limit or who answers.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { apiTestContext, counts } from "../testkit/api.ts";
import { serve } from "../lib/platform/runtime.ts";
import { tokenFor } from "../testkit/auth.ts";
import { exchange } from "../testkit/raw-http.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("api_header_limit");
const server = serve(0, api.fetch, "127.0.0.1");
afterAll(() => server.stop());

// Bun's request-header limit (its default, 16 KiB): one header of this many bytes is over it.
const OVER_THE_LIMIT_BYTES = 17 * 1024;

test("a POST /charges whose headers are over the limit: Bun's bare 431, connection closed, nothing written", async () => {
  const body = JSON.stringify({ amountCents: 4900 });
  const answer = await exchange(
    server.port,
    [
      "POST /charges HTTP/1.1",
      "host: localhost",
      `authorization: Bearer ${await tokenFor()}`,
      "content-type: application/json",
      `idempotency-key: ${crypto.randomUUID()}`,
      `x-padding: ${"a".repeat(OVER_THE_LIMIT_BYTES)}`,
      `content-length: ${body.length}`,
      "",
      body,
    ].join("\r\n"),
  );
  const [head = "", rest = ""] = answer.split("\r\n\r\n");
  expect(head.split("\r\n")[0]).toBe("HTTP/1.1 431 Request Header Fields Too Large");
  expect(head.toLowerCase()).toContain("connection: close");
  expect(rest).toBe("");
  expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
});
