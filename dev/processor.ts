// Dev mode's payment processor: the Stripe API simulator (dev/processor-sim/), in process on
// a free port of 127.0.0.1, and the environment that points the API at it.
import { startProcessorSim, type ProcessorSim } from "./processor-sim/index.ts";

/** The secret key dev mode hands the API for the simulator: any test-mode key is accepted. */
export const DEV_PROCESSOR_KEY = "sk_test_dev_mode_processor_sim";

export function startDevProcessor(): Promise<ProcessorSim> {
  return startProcessorSim({ hostname: "127.0.0.1" });
}

/** The variables that make the API charge through the simulator (PAYMENT_PROCESSOR=stripe). */
export function processorEnv(sim: Pick<ProcessorSim, "url">): Record<string, string> {
  return { PAYMENT_PROCESSOR: "stripe", PAYMENT_PROCESSOR_URL: sim.url, PAYMENT_PROCESSOR_KEY: DEV_PROCESSOR_KEY };
}
