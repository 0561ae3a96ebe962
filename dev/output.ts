// Prefixed, aligned, optionally coloured lines for `bun run dev`, and the "ready" banner.
import { relative } from "node:path";
import { POSTGRES_USER } from "./pg-user.ts";
import { maskUrl } from "../lib/platform/redact.ts";

const COLOURS: Record<string, string> = {
  dev: "1", postgres: "34", mqtt: "35", processor: "31", api: "32", relay: "33", subscriber: "36",
};
const WIDTH = Math.max(...Object.keys(COLOURS).map((name) => name.length));
const useColour = Boolean(process.stdout.isTTY) && !process.env.NO_COLOR;

export function print(name: string, line: string): void {
  const label = name.padEnd(WIDTH);
  const code = COLOURS[name];
  console.log(useColour && code ? `\x1b[${code}m${label} |\x1b[0m ${line}` : `${label} | ${line}`);
}

// Postgres logs every checkpoint; in dev only what needs attention and start/stop matter.
const POSTGRES_WORTH_SHOWING = /WARNING|ERROR|FATAL|PANIC|ready to accept|shut down/;

export function printPostgres(line: string): void {
  if (POSTGRES_WORTH_SHOWING.test(line)) print("postgres", line);
}

export interface EmbeddedCluster {
  readonly how: "started" | "shared";
  readonly created: boolean;
  readonly port: number;
  readonly dataDir: string;
  readonly cache: string | undefined;
}

/** Where the cluster is: relative to the project normally, the full path when it sits in the cache folder. */
export function dataPlace(cluster: EmbeddedCluster, root: string): string {
  return cluster.cache ? cluster.dataDir : relative(root, cluster.dataDir);
}

/** The start-up line, saying where the data is, and why when it is not in the project. */
export function embeddedPostgresLine(cluster: EmbeddedCluster, ms: number, root: string): string {
  const what = cluster.created ? "created and started" : cluster.how === "started" ? "started" : "shared with another process,";
  const why = cluster.cache ? `, because the user "${POSTGRES_USER}" cannot reach this project's directory` : "";
  return `embedded Postgres ${what} in ${ms} ms on port ${cluster.port} (data in ${dataPlace(cluster, root)}${why})`;
}

export interface Endpoints {
  readonly api: string;
  readonly relay: string;
  readonly databaseUrl: string;
  readonly databaseNote: string;
  /** DATABASE_DIRECT_URL, masked, when set (the database is then a pooler). */
  readonly databaseDirectUrl: string | undefined;
  readonly mqttUrl: string;
  readonly mqttNote: string;
  /** The payment-processor simulator (dev/processor-sim/), when dev mode started one. */
  readonly processorUrl?: string;
  /** The test payment method the printed curl sends, when the API charges through the simulator. */
  readonly paymentMethod?: string;
  /** The Authorization header value of the printed curl (none with AUTH_MODE=none). */
  readonly authorization: string | undefined;
  readonly authNote: string;
  /** The operator console's sign-in link (an operator token in its query), when dev mode can mint one. */
  readonly consoleUrl?: string;
}

export function banner(endpoints: Endpoints): string[] {
  return [
    "ready: api, relay and subscriber are running. Ctrl-C stops everything.",
    `  API        ${endpoints.api}   (reference at ${endpoints.api}/docs; /openapi.json, /metrics, /readyz)`,
    `  relay      ${endpoints.relay}/readyz   (/metrics)`,
    // DATABASE_URL and MQTT_URL, when set, may carry passwords (and a list of hosts).
    `  Postgres   ${maskUrl(endpoints.databaseUrl)}   ${endpoints.databaseNote}`,
    ...(endpoints.databaseDirectUrl ? [`  direct     ${maskUrl(endpoints.databaseDirectUrl)}   (DATABASE_DIRECT_URL: the relay's LISTEN and the jobs' locks)`] : []),
    `  MQTT       ${maskUrl(endpoints.mqttUrl)}   ${endpoints.mqttNote}`,
    ...(endpoints.processorUrl ? [`  processor  ${endpoints.processorUrl}   (Stripe API simulator; ledger at ${endpoints.processorUrl}/_sim/ledger, docs/dev-mode.md)`] : []),
    `  auth       ${endpoints.authNote}`,
    ...(endpoints.consoleUrl ? [`  console    ${endpoints.consoleUrl}   (the operator console, opens signed in; docs/console.md)`] : []),
    "create a charge (paste it twice: the second answer is the stored one, with Idempotent-Replayed: true):",
    curlFor(endpoints, crypto.randomUUID(), endpoints.paymentMethod),
    ...(endpoints.paymentMethod ? ["a card the processor declines (a 402 card-declined, stored under its key and replayed as well):", curlFor(endpoints, crypto.randomUUID(), DECLINED_CARD)] : []),
    ...clientSnippet(endpoints),
  ];
}

// Stripe's test card that declines (generic_decline): the simulator declines it as Stripe does.
const DECLINED_CARD = "pm_card_chargeDeclined";

function curlFor(endpoints: Endpoints, key: string, paymentMethod: string | undefined): string {
  const auth = endpoints.authorization ? ` -H 'Authorization: ${endpoints.authorization}'` : "";
  return `  curl -i -X POST ${endpoints.api}/charges -H 'Content-Type: application/json'${auth} -H 'Idempotency-Key: ${key}' -d '${chargeBody(paymentMethod)}'`;
}

function chargeBody(paymentMethod: string | undefined, manual = false): string {
  return `{"amountCents": 4900${paymentMethod ? `, "paymentMethod": "${paymentMethod}"` : ""}${manual ? `, "capture": "manual"` : ""}}`;
}

/** The same charge from TypeScript, with the client that resends one key and one body (docs/client.md). */
function clientSnippet(endpoints: Endpoints): string[] {
  const token = endpoints.authorization?.replace(/^Bearer /, "");
  return [
    "or from TypeScript, with the client that retries with one key (docs/client.md), in a file of this project:",
    `  import { ChargesClient } from "charges-outbox/client";`,
    `  const client = new ChargesClient({ baseUrl: "${endpoints.api}"${token ? `, token: "${token}"` : ""} });`,
    `  const { charge, replayed, attempts } = await client.charges.create(${chargeBody(endpoints.paymentMethod)});`,
    "  // Authorize now, capture later: the charge is authorized, then 3000 of its 4900 captured (the rest released).",
    `  const authorized = await client.charges.create(${chargeBody(endpoints.paymentMethod, true)});`,
    "  const captured = await client.charges.capture(authorized.charge.id, { amountCents: 3000 });",
    "  console.log(authorized.charge.status, captured.charge.status, captured.charge.capturedCents);",
  ];
}
