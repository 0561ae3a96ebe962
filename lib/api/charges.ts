// The charge service: the Idempotency-Key contract as values. Expected outcomes are a
// discriminated union; only bugs and infrastructure faults throw.
import type { Sql } from "../shared/db.ts";
import { CHARGE_CREATED, chargeCreatedPayload, newEventId } from "../events.ts";
import { UNIQUE_VIOLATION, isConnectionLost, sqlState } from "../shared/db.ts";
import { createCharge, findCharge, findKey, type CreateChargeParams, type StoredResponse } from "./charges-sql.ts";
import type { ChargeBatcher } from "./charge-batcher.ts";
import { advisoryLockId, fingerprint, type ChargeFields } from "./fingerprint.ts";
import { chargeJson, type Charge } from "./schemas.ts";
import { UNBOUNDED, type PoolGate } from "../shared/pool-gate.ts";

export const CHARGES_ENDPOINT = "POST /charges";

export type ChargeOutcome =
  | { readonly kind: "created"; readonly status: number; readonly body: string; readonly chargeId: string }
  | { readonly kind: "replayed"; readonly status: number; readonly body: string; readonly chargeId: string }
  | { readonly kind: "payload_conflict" }
  | { readonly kind: "in_flight" };

export type ChargeLookup = { readonly kind: "found"; readonly body: string } | { readonly kind: "not_found" };

interface ChargeRequest extends ChargeFields {
  /** Whose key and charge this is: every read and write is scoped to it. */
  readonly tenant: string;
  readonly key: string;
  readonly traceparent?: string | null;
}

interface ChargeServiceOptions {
  readonly ttlSeconds: number;
  /** Called after a charge committed; the relay's wake-up hangs here. */
  readonly onCreated?: () => void;
  /** The pool wait and request deadline; without it, statements are sent at once. */
  readonly bounds?: PoolGate;
  /** Group commit under load (charge-batcher.ts); without it, each request is its own statement. */
  readonly batcher?: ChargeBatcher;
}

export interface ChargeService {
  create(request: ChargeRequest): Promise<ChargeOutcome>;
  /** `id` must already be a UUID (the caller answers 400 otherwise); another tenant's charge is not found. */
  get(tenant: string, id: string): Promise<ChargeLookup>;
}

export function createChargeService(sql: Sql, options: ChargeServiceOptions): ChargeService {
  return {
    async create(request) {
      const deadline = options.bounds?.deadline() ?? UNBOUNDED;
      const identity = chargeIdentity(request);
      let outcome: ChargeOutcome | undefined;
      for (let resends = 0; outcome === undefined; resends++) {
        try {
          // Each try waits for a slot of the pool and starts only within the request's deadline.
          outcome = await deadline.run((endsAt) => attempt(sql, options, request, identity, endsAt));
        } catch (error) {
          if (resends >= MAX_RESENDS || !isConnectionLost(error)) throw error;
        }
      }
      if (outcome.kind === "created") options.onCreated?.();
      return outcome;
    },
    async get(tenant, id) {
      const row = await (options.bounds?.deadline() ?? UNBOUNDED).run((endsAt) => findCharge(sql, tenant, id, endsAt));
      if (!row) return { kind: "not_found" };
      const charge: Charge = { id: row.id, amountCents: row.amount_cents, createdAt: row.created_at.toISOString() };
      return { kind: "found", body: chargeJson(charge) };
    },
  };
}

// A pooled connection whose backend was killed fails the statement sent on it (and, with
// postgres.js, sometimes the next one too). Sending the statement again on a fresh
// connection is safe: it is atomic and keyed, and every try writes the same identity, so a
// resend that finds a row of a try that did commit knows it as its own.
// (The loop is in create(): a function of its own would add an async frame to every charge.)
const MAX_RESENDS = 2;

/** What a request writes, fixed once before its first try so every resend writes the same. */
interface ChargeIdentity {
  readonly requestHash: string;
  readonly chargeId: string;
  readonly eventId: string;
  readonly createdAt: string;
  readonly responseBody: string;
}

function chargeIdentity(request: ChargeRequest): ChargeIdentity {
  const chargeId = crypto.randomUUID();
  const createdAt = new Date().toISOString();
  return {
    requestHash: fingerprint(request),
    chargeId,
    eventId: newEventId(),
    createdAt,
    responseBody: chargeJson({ id: chargeId, amountCents: request.amountCents, createdAt }),
  };
}

async function attempt(sql: Sql, options: ChargeServiceOptions, request: ChargeRequest, identity: ChargeIdentity, endsAt: number): Promise<ChargeOutcome> {
  const { requestHash, chargeId, createdAt, responseBody } = identity;
  let row;
  try {
    const params: CreateChargeParams = {
      tenant: request.tenant,
      key: request.key,
      endpoint: CHARGES_ENDPOINT,
      lockId: advisoryLockId(request.tenant, request.key, CHARGES_ENDPOINT),
      requestHash,
      ttlSeconds: options.ttlSeconds,
      chargeId,
      amountCents: request.amountCents,
      createdAt,
      responseStatus: 201,
      responseBody,
      eventId: identity.eventId,
      eventType: CHARGE_CREATED,
      eventPayload: chargeCreatedPayload({ chargeId, amountCents: request.amountCents }),
      traceparent: request.traceparent ?? null,
    };
    row = await (options.batcher ? options.batcher.create(params, endsAt) : createCharge(sql, params, endsAt));
  } catch (error) {
    // The unique constraint is the safety net under the advisory lock: whoever hits it
    // lost a race with a request for the same key, which is by definition in flight.
    if (sqlState(error) === UNIQUE_VIOLATION) return { kind: "in_flight" };
    throw error;
  }
  if (row.created === 1) return { kind: "created", status: 201, body: responseBody, chargeId };
  if (row.request_hash !== null) return fromStored(row as StoredResponse, identity);
  if (row.got === false) return { kind: "in_flight" };
  // Locked but not written: the key row was committed by another request between this
  // statement's snapshot and its insert. Read what it stored (rare; one more round trip).
  const stored = await findKey(sql, request.tenant, request.key, CHARGES_ENDPOINT, endsAt);
  return stored ? fromStored(stored, identity) : { kind: "in_flight" };
}

function fromStored(stored: StoredResponse, identity: ChargeIdentity): ChargeOutcome {
  if (stored.request_hash !== identity.requestHash) return { kind: "payload_conflict" };
  if (stored.status !== "COMPLETED" || stored.response_status === null || stored.response_body === null) {
    return { kind: "in_flight" };
  }
  const chargeId = chargeIdOf(stored.response_body);
  // This request's own earlier try committed before its connection was lost: still the
  // creation, answered, counted and followed by a wake-up as one.
  const kind = chargeId === identity.chargeId ? "created" : "replayed";
  return { kind, status: stored.response_status, body: stored.response_body, chargeId };
}

function chargeIdOf(body: string): string {
  const parsed: unknown = JSON.parse(body);
  if (typeof parsed === "object" && parsed !== null && typeof (parsed as { id?: unknown }).id === "string") {
    return (parsed as { id: string }).id;
  }
  throw new Error("bug: stored response has no charge id");
}
