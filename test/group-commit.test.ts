// The foreign statements' group commit (lib/idempotency/group-commit.ts) against a real server: batches
// form only while statements run, never mix conflicting items, hold a gate slot per statement,
// and a batch that fails on one item's data answers every other item from its own statement.
import { afterAll, expect, test } from "bun:test";
import { createGroupCommit, type GroupStatement } from "../lib/idempotency/group-commit.ts";
import { freshDatabase } from "../testkit/services.ts";

const db = await freshDatabase("group_commit");
afterAll(() => db.drop());

interface Item {
  readonly divisor: number;
  readonly conflict: string;
}

/** 100 / divisor per item, one statement per send; the sizes of the statements sent. */
function divide(): { statement: GroupStatement<Item, number>; sizes: number[] } {
  const sizes: number[] = [];
  const statement: GroupStatement<Item, number> = {
    async send(items) {
      sizes.push(items.length);
      // One row: an error is raised before any row is sent, as our statements' are.
      const [row] = await db.sql<{ q: number[] }[]>`
        select array_agg((100 / d)::int order by n) as q from unnest(${items.map((i) => i.divisor)}::int[]) with ordinality as t(d, n)`;
      return row!.q;
    },
    conflicts: (item) => [item.conflict],
  };
  return { statement, sizes };
}

test("items queued while a statement runs go as one statement, each answered from its own row; a conflicting item waits for the next", async () => {
  const { statement, sizes } = divide();
  let slots = 0;
  let maxSlots = 0;
  const group = createGroupCommit({
    maxInFlight: 1,
    maxBatch: 10,
    statementTimeoutMs: 0,
    slot: async (work) => {
      maxSlots = Math.max(maxSlots, ++slots);
      try {
        return await work(Number.POSITIVE_INFINITY);
      } finally {
        slots--;
      }
    },
  });
  const items: Item[] = [{ divisor: 1, conflict: "a" }, { divisor: 2, conflict: "b" }, { divisor: 4, conflict: "c" }, { divisor: 5, conflict: "b" }, { divisor: 10, conflict: "d" }];
  const answers = await Promise.all(items.map((item) => group.run(statement, item, Number.POSITIVE_INFINITY)));
  expect(answers).toEqual([100, 50, 25, 20, 10]);
  // The first alone at once; then b, c, d together; the second b after them.
  expect(sizes).toEqual([1, 3, 1]);
  expect(maxSlots).toBe(1);
});

test("a batch that fails on one item's data is sent again item by item: the others get their answers, that one its error", async () => {
  const { statement, sizes } = divide();
  const group = createGroupCommit({ maxInFlight: 1, maxBatch: 10, statementTimeoutMs: 0 });
  const items: Item[] = [{ divisor: 1, conflict: "a" }, { divisor: 2, conflict: "b" }, { divisor: 0, conflict: "c" }, { divisor: 4, conflict: "d" }];
  const answers = await Promise.allSettled(items.map((item) => group.run(statement, item, Number.POSITIVE_INFINITY)));
  expect(answers.map((a) => (a.status === "fulfilled" ? a.value : (a.reason as { code?: string }).code))).toEqual([100, 50, "22012", 25]);
  expect(sizes).toEqual([1, 3, 1, 1, 1]);
});
