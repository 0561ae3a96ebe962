// `bun api.ts`: the charges HTTP API on PORT.
import { configOrExit } from "./lib/config.ts";
import { startApi, StartupError } from "./lib/api-main.ts";
import { onShutdownSignal, serve } from "./lib/runtime.ts";

const config = configOrExit(process.env);
const api = await startApi(config).catch((error: unknown) => {
  if (error instanceof StartupError) {
    console.error(`api: ${error.message}`);
    process.exit(1);
  }
  throw error;
});
const server = serve(config.port, api.fetch);
console.log(JSON.stringify({ level: "info", msg: "api listening", port: server.port }));

onShutdownSignal(async (signal) => {
  console.log(JSON.stringify({ level: "info", msg: "api stopping", signal }));
  await server.stop();
  await api.close();
  process.exit(0);
});
