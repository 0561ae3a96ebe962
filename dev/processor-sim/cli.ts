// `bun dev/processor-sim/cli.ts [--port N] [--host H] [--latency-ms N]`: the processor
// simulator on its own. Prints one line with its URL, then serves until SIGTERM or SIGINT.
// Drive its faults and read its ledger through /_sim/ (dev/processor-sim/control.ts).
import { startProcessorSim } from "./index.ts";

const USAGE = "usage: bun dev/processor-sim/cli.ts [--port N] [--host HOST] [--latency-ms N]";
// The highest TCP port.
const MAX_PORT = 65_535;

function fail(line: string): never {
  console.error(`processor-sim: ${line}`);
  process.exit(1);
}

interface CliOptions {
  port: number;
  hostname: string;
  latencyMs: number;
}

function parseArgs(args: string[]): CliOptions {
  const options: CliOptions = { port: 0, hostname: "127.0.0.1", latencyMs: 0 };
  for (let i = 0; i < args.length; i += 2) {
    const [flag, value] = [args[i], args[i + 1]];
    if (value === undefined) fail(USAGE);
    if (flag === "--host") options.hostname = value;
    else if (flag === "--port") options.port = integerIn(value, "--port", MAX_PORT);
    else if (flag === "--latency-ms") options.latencyMs = integerIn(value, "--latency-ms", Number.MAX_SAFE_INTEGER);
    else fail(USAGE);
  }
  return options;
}

function integerIn(raw: string, flag: string, max: number): number {
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || value > max) fail(`${flag} must be an integer from 0 to ${max}, got "${raw}"`);
  return value;
}

const options = parseArgs(process.argv.slice(2));
const sim = await startProcessorSim(options).catch((error: unknown) => fail(`cannot listen on ${options.hostname}:${options.port}: ${error instanceof Error ? error.message : String(error)}`));
console.log(`processor-sim listening on ${sim.url} (Stripe API v1 PaymentIntents and Refunds; control at ${sim.url}/_sim/)`);
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    void sim.stop().then(() => process.exit(0));
  });
}
