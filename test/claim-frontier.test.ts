// Where the relay's claims start (lib/relay/claim-lock.ts): a pure rule over the claims'
// results and the time, checked with explicit times.
import { expect, test } from "bun:test";
import { createClaimFrontier } from "../lib/relay/claim-lock.ts";

const T = "2026-11-30T12:00:00.000001Z";
const U = "2026-11-30T12:00:00.000002Z";

test("the first claim starts at the top; after a full claim the next starts where it ended", () => {
  const frontier = createClaimFrontier();
  expect(frontier.from(0)).toBeUndefined();
  frontier.claimed(100, 100, T);
  expect(frontier.from(10)).toBe(T);
  frontier.claimed(100, 100, U);
  expect(frontier.from(20)).toBe(U);
});

test("after a short claim the next starts at the top: whatever appeared behind is found", () => {
  const frontier = createClaimFrontier();
  frontier.from(0);
  frontier.claimed(100, 100, T);
  expect(frontier.from(10)).toBe(T);
  frontier.claimed(100, 40, U);
  expect(frontier.from(20)).toBeUndefined();
});

test("while every claim comes back full, one starts at the top at least once a second", () => {
  const frontier = createClaimFrontier();
  expect(frontier.from(0)).toBeUndefined();
  frontier.claimed(100, 100, T);
  expect(frontier.from(999)).toBe(T);
  frontier.claimed(100, 100, U);
  expect(frontier.from(1000)).toBeUndefined();
  frontier.claimed(100, 100, T);
  expect(frontier.from(1500)).toBe(T);
  expect(frontier.from(2000)).toBeUndefined();
});
