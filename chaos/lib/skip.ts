// A scenario that cannot run here (a tool it needs is missing) says why and exits with this
// code; run-all.ts counts it as skipped, neither passed nor failed. 77 is the automake
// convention, as test/private-dir-smoke.ts uses it.
export const SCENARIO_SKIPPED = 77;

/** One line naming what is missing, then exit SCENARIO_SKIPPED. */
export function skipScenario(label: string, why: string): never {
  console.log(`chaos ${label}: SKIPPED: ${why}`);
  process.exit(SCENARIO_SKIPPED);
}
