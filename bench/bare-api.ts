// The bare-stack limit of the API: `Bun.serve` + postgres.js running the API's one
// statement for POST /charges (lib/idempotency/skeleton.ts runClaim with the charges operation, imported
// so the two never drift), one request per statement, with the same parameter shapes (a
// SHA-256 hex fingerprint, a 64-bit lock id from a SHA-256, a random charge id and a
// time-ordered event id, the stored 201 body, the event payload) and nothing else: no
// validation, no authentication, no metrics, no logs, no pool gate, no group commit, no relay
// wake-up.
// `DATABASE_URL=… PORT=… bun bench/bare-api.ts`; GET answers 200 (the bench's ready check).
import { createHash } from "node:crypto";
import postgres from "postgres";
import { compile, runClaim, type Compiled } from "../lib/idempotency/skeleton.ts";
import { createCharge } from "../lib/charges/charges.ts";
import { newEventId } from "../lib/platform/uuid.ts";
import type { Sql } from "../lib/platform/db.ts";

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

async function charge(sql: Sql, statement: Compiled, request: Request): Promise<Response> {
  const key = request.headers.get("idempotency-key") ?? "";
  const text = await request.text();
  const amountCents = (JSON.parse(text) as { amountCents: number }).amountCents;
  const chargeId = crypto.randomUUID();
  const createdAt = new Date().toISOString();
  const responseBody = JSON.stringify({ id: chargeId, amountCents, createdAt });
  const [row] = await runClaim(sql, statement, { ttlSeconds: TTL_SECONDS, leaseMs: 0 }, [
    {
      n: 0,
      tenant: TENANT,
      key,
      lock_id: lockIdOf(key),
      request_hash: createHash("sha256").update(text).digest("hex"),
      response_body: responseBody,
      event_id: newEventId(),
      traceparent: null,
      charge_id: chargeId, amount_cents: amountCents, currency: "usd", status: "succeeded", created_at: createdAt, payload: JSON.stringify({ chargeId, amountCents, currency: "usd" }),
    },
  ]);
  const body = row!.created === 1 ? responseBody : (row!.response_body ?? "{}");
  return new Response(body, { status: 201, headers: { "content-type": "application/json", location: `/charges/${chargeId}` } });
}

if (import.meta.main) {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error("DATABASE_URL is required");
  const sql = postgres(url, { max: POOL_SIZE, prepare: true, connection: { application_name: BARE_APP } }) as unknown as Sql;
  const statement = compile(sql, createCharge, "ledger");
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
