// A checkout of an earlier commit, for figures that compare this relay or API with the one before a
// change, in the same run: `git worktree add --detach` in a temporary directory, sharing
// this checkout's node_modules (the dependencies have not changed since), removed after.
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT } from "../testkit/processes.ts";
import { run } from "./support.ts";

// The relay before per-aggregate order (commit "ci: name what failed …", the parent of the
// claim by heads and followers). BENCH_RELAY_BASELINE names another commit.
export const ORDER_BASELINE = "14a3b2877bc4435616e946e8ed2c0971059ad02b";
// The API before it counted its pool's open connections (commit "bench: the HTTP histogram's
// cost measured side by side", the parent of the count). BENCH_API_BASELINE names another.
export const OPEN_COUNT_BASELINE = "36eeacb6e50e0d165ce6f99fc89f1b5a627d8c86";
// The API before the HTTP layer moved to Elysia (commit "deps: stripe 23.1.0 …", whose API is
// the hand-written router's). BENCH_ELYSIA_BASELINE names another.
export const ELYSIA_BASELINE = "f9554e7";
// The API before the processor mode (commit "api: the document, the page and its files are
// counted …", the last before the processor's merge): its ledger's statement has no currency
// column. BENCH_LEDGER_BASELINE names another.
export const LEDGER_BASELINE = "7e04ac1";

export interface Checkout {
  readonly dir: string;
  remove(): Promise<void>;
}

export async function checkoutOf(ref: string): Promise<Checkout> {
  const dir = join(mkdtempSync(join(tmpdir(), "bench-baseline-")), "tree");
  await run(["git", "-C", ROOT, "worktree", "add", "--detach", dir, ref]);
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
  return {
    dir,
    async remove() {
      await run(["git", "-C", ROOT, "worktree", "remove", "--force", dir]).catch(() => "");
      rmSync(join(dir, ".."), { recursive: true, force: true });
    },
  };
}
