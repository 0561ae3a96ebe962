// The subscriber's one call to the API: GET /charges/:id/events?after=<last processed>, every
// page. Each element is the envelope the relay published with JSON.stringify, so JSON.stringify
// gives back the payload's text.
import { parseEnvelope } from "../charges/events.ts";
import type { SequencedEvent } from "./process.ts";
import type { GapFillApi } from "./types.ts";

// The API answers within its own bound (5 s by default) or not at all.
const REQUEST_TIMEOUT_MS = 10_000;
// Of 500 events each: a longer gap is filled by the next asks.
const MAX_PAGES = 10;

export interface FetchedEvent {
  readonly event: SequencedEvent;
  readonly payload: string;
}

export type ApiAnswer =
  | { readonly kind: "events"; readonly events: readonly FetchedEvent[] }
  /** 404: no such charge for the token's tenant (another tenant's, or gone). */
  | { readonly kind: "unknown" };

/** A refusal or fault of the API: the gap is asked again later. */
export class ApiError extends Error {}

/** The charge's events after `after`; throws ApiError when the API does not answer them (or `stop` aborts the call). */
export async function fetchChargeEvents(api: GapFillApi, chargeId: string, after: number, stop: AbortSignal): Promise<ApiAnswer> {
  const events: FetchedEvent[] = [];
  let path: string | undefined = `/charges/${encodeURIComponent(chargeId)}/events?after=${after}`;
  for (let page = 0; path !== undefined && page < MAX_PAGES; page++) {
    const response = await get(api, path, stop);
    if (response.status === 404 && page === 0) return { kind: "unknown" };
    if (response.status !== 200) throw new ApiError(`GET ${path} answered ${response.status}${await problemOf(response)}`);
    events.push(...eventsOf(await response.text(), chargeId, path));
    path = response.headers.get("link")?.match(/^<(\/[^>]*)>;\s*rel="next"$/)?.[1];
  }
  return { kind: "events", events };
}

async function get(api: GapFillApi, path: string, stop: AbortSignal): Promise<Response> {
  const fetchIt = api.fetch ?? ((url: string, init: RequestInit) => fetch(url, init));
  const headers = { accept: "application/json", authorization: `Bearer ${await api.token()}` };
  try {
    return await fetchIt(`${api.url}${path}`, { headers, signal: AbortSignal.any([stop, AbortSignal.timeout(REQUEST_TIMEOUT_MS)]) });
  } catch (error) {
    throw new ApiError(`GET ${path} failed: ${error instanceof Error ? error.message : String(error)}`);
  }
}

async function problemOf(response: Response): Promise<string> {
  const problem = (await response.json().catch(() => undefined)) as { detail?: unknown } | null | undefined;
  return typeof problem?.detail === "string" ? `: ${problem.detail}` : "";
}

function eventsOf(body: string, chargeId: string, path: string): FetchedEvent[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw new ApiError(`GET ${path} answered a body that is not JSON`);
  }
  const list = (parsed as { events?: unknown } | null)?.events;
  if (!Array.isArray(list)) throw new ApiError(`GET ${path} answered no events array`);
  return list.map((element: unknown) => {
    const payload = JSON.stringify(element);
    const envelope = parseEnvelope(payload);
    // Not what the route answers: nothing is processed from it.
    if (envelope?.sequence === undefined || envelope.aggregateId !== chargeId) throw new ApiError(`GET ${path} answered an event that is not one of the charge's`);
    return { event: { ...envelope, sequence: envelope.sequence }, payload };
  });
}
