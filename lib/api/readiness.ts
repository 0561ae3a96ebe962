// GET /readyz from a result at most READY_MAX_AGE_MS old: one database probe at a time, shared
// by every request meanwhile, so a load balancer polling often takes no connections from charges.
import { probeDatabase, type Sql } from "../platform/db.ts";

export const READY_MAX_AGE_MS = 1000;
// /readyz answers "not ready" rather than hang when the database does not answer.
const READY_TIMEOUT_MS = 2000;

export type Readiness = ReturnType<typeof createReadiness>;

export function createReadiness(now: () => number = Date.now) {
  let last: { up: boolean; at: number } | undefined;
  let probing: Promise<boolean> | undefined;
  return {
    check(sql: Sql): Promise<boolean> {
      if (last !== undefined && now() - last.at < READY_MAX_AGE_MS) return Promise.resolve(last.up);
      probing ??= probeDatabase(sql, READY_TIMEOUT_MS)
        .then((result) => {
          last = { up: result.up, at: now() };
          return result.up;
        })
        .finally(() => (probing = undefined));
      return probing;
    },
  };
}
