// #40 item 3's hot-path check: the ledger's created/s with the tombstone-aware key lookup
// against the same code without it (a checkout of `ref`, by default the core branch), side by
// side on shared cores (side-by-side.ts), alternating which starts first. Each on its own
// database (the two releases' schemas differ by migration 0008).
//   bun bench/keys-ab.ts [ref=core] [rounds=4] [seconds=8]
import { checkoutOf } from "./relay-baseline.ts";
import { compareSideBySide } from "./side-by-side.ts";
import { log } from "./support.ts";

// The ledger's usual load (bench/README.md row 2).
const CONNECTIONS = 32;

if (import.meta.main) {
  const ref = process.argv[2] ?? "core";
  const rounds = Number(process.argv[3] ?? 4);
  const seconds = Number(process.argv[4] ?? 8);
  const baseline = await checkoutOf(ref);
  try {
    const c = await compareSideBySide(rounds, CONNECTIONS, seconds, { label: "keys", env: {}, ownDatabase: true }, { label: ref, env: {}, cwd: baseline.dir, ownDatabase: true });
    log(`keys vs ${ref}: ratio ${c.ratio.toFixed(3)} (rounds ${c.rounds.map((r) => (r.aPerSec / r.bPerSec).toFixed(3)).join(", ")}), ${c.aPerSec.toFixed(0)} vs ${c.bPerSec.toFixed(0)} created/s`);
  } finally {
    await baseline.remove();
  }
  process.exit(0);
}
