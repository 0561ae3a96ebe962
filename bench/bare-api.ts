// The bare-stack limit of the API: `Bun.serve` + postgres.js running the API's one
// statement for POST /charges (lib/api/core/statement.ts with the charges operation, imported
// so the two never drift), one request per statement, with the same parameter shapes (a
// SHA-256 hex fingerprint, a 64-bit lock id from a SHA-256, a random charge id and a
// time-ordered event id, the stored 201 body, the event payload) and nothing else: no
// validation, no authentication, no metrics, no logs, no pool gate, no group commit, no relay
// wake-up.
// `DATABASE_URL=… PORT=… bun bench/bare-api.ts`; GET answers 200 (the bench's ready check).
import { createHash } from "node:crypto";
import postgres from "postgres";
import { compileOperation, runOperation, type CompiledOperation } from "../lib/api/core/statement.ts";
import { createCharge } from "../lib/api/operations/charges.ts";
import { newEventId } from "../lib/events.ts";
import type { Sql } from "../lib/shared/db.ts";

// The API's pool size (lib/api/start.ts API_POOL_SIZE), so both hold as many connections.
const POOL_SIZE = 32;
// The API's idempotency TTL default (24 h); the value only fills the column.
const TTL_SECONDS = 86_400;
const TENANT = "default";
/** The application_name the bench finds this server's backends by. */
export const BARE_APP = "bench-bare-api";

function lockIdOf(key: string): string {
  return createHash("sha256").update(key).digest().readBigInt64BE(0).toString();
}

async function charge(sql: Sql, statement: CompiledOperation, request: Request): Promise<Response> {
  const key = request.headers.get("idempotency-key") ?? "";
  const text = await request.text();
  const amountCents = (JSON.parse(text) as { amountCents: number }).amountCents;
  const chargeId = crypto.randomUUID();
  const createdAt = new Date().toISOString();
  const responseBody = JSON.stringify({ id: chargeId, amountCents, createdAt });
  const [row] = await runOperation(sql, statement, TTL_SECONDS, [
    {
      tenant: TENANT,
      key,
      lockId: lockIdOf(key),
      requestHash: createHash("sha256").update(text).digest("hex"),
      responseBody,
      eventId: newEventId(),
      traceparent: null,
      columns: { charge_id: chargeId, amount_cents: amountCents, currency: "usd", created_at: createdAt, payload: JSON.stringify({ chargeId, amountCents, currency: "usd" }) },
    },
  ]);
  const body = row!.created === 1 ? responseBody : (row!.response_body ?? "{}");
  return new Response(body, { status: 201, headers: { "content-type": "application/json", location: `/charges/${chargeId}` } });
}

if (import.meta.main) {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error("DATABASE_URL is required");
  const sql = postgres(url, { max: POOL_SIZE, prepare: true, connection: { application_name: BARE_APP } }) as unknown as Sql;
  const statement = compileOperation(sql, createCharge);
  const server = Bun.serve({
    port: Number(process.env.PORT ?? 0),
    hostname: "127.0.0.1",
    fetch: (request) => (request.method === "POST" ? charge(sql, statement, request) : new Response("ok")),
  });
  console.error(`bare api on ${server.port}`);
  process.on("SIGTERM", () => {
    void server.stop(true);
    void sql.end({ timeout: 1 }).then(() => process.exit(0));
  });
}
