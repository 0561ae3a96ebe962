// The control surface, on the simulator's own port so that another process can drive it:
//   GET /_sim/ledger     the SimLedger as JSON
//   GET /_sim/faults     the faults in force
//   PUT /_sim/faults     a SimFaults as JSON, replacing the faults in force (204)
//   DELETE /_sim/faults  no faults (204)
//   GET /_sim/requests   the calls seen, newest last
// While "refuse" is on, this is unreachable too: give the rule a refuseForMs to get it back.
import type { ServerResponse } from "node:http";
import { faultsProblem } from "./faults.ts";
import type { SimFaults, SimLedger, SimRequestEntry } from "./types.ts";

export const CONTROL_PREFIX = "/_sim/";

export interface Controls {
  ledger(): SimLedger;
  faults(): SimFaults;
  requests(): SimRequestEntry[];
  /** Replaces the faults; a refusal among them takes effect once this answer has gone out. */
  setFaults(faults: SimFaults, answered: Promise<void>): void;
  clearFaults(): void;
}

export function control(method: string, path: string, body: string, response: ServerResponse, controls: Controls): void {
  const resource = path.slice(CONTROL_PREFIX.length);
  if (method === "GET" && resource === "ledger") return json(response, 200, controls.ledger());
  if (method === "GET" && resource === "requests") return json(response, 200, controls.requests());
  if (resource !== "faults") return problem(response, 404, "Not found", `no control resource ${method} ${path}`);
  if (method === "GET") return json(response, 200, controls.faults());
  if (method === "DELETE") {
    controls.clearFaults();
    return noContent(response);
  }
  if (method !== "PUT") return problem(response, 405, "Method not allowed", "faults take GET, PUT and DELETE");
  const parsed = parseJson(body);
  const wrong = parsed.ok ? faultsProblem(parsed.value) : "the body is not JSON";
  if (wrong || !parsed.ok) return problem(response, 400, "Invalid faults", wrong ?? "");
  const answered = new Promise<void>((resolve) => response.once("finish", () => resolve()));
  controls.setFaults(parsed.value as SimFaults, answered);
  noContent(response);
}

function parseJson(body: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(body) };
  } catch {
    return { ok: false };
  }
}

function json(response: ServerResponse, status: number, value: unknown): void {
  response.writeHead(status, { "Content-Type": "application/json" });
  response.end(JSON.stringify(value));
}

function noContent(response: ServerResponse): void {
  response.writeHead(204);
  response.end();
}

function problem(response: ServerResponse, status: number, title: string, detail: string): void {
  response.writeHead(status, { "Content-Type": "application/problem+json" });
  response.end(JSON.stringify({ type: "about:blank", title, status, detail }));
}
