// Stripe's error bodies, `{"error": {"type", "code", "message", "param", …}}`, and the check of
// a call's parameters against what its endpoint takes, with Stripe's codes and wording.
import type { FormObject, FormValue } from "./form.ts";
import { formList } from "./form.ts";

/** An answer to an API call; `stored` says whether Stripe keeps it under the idempotency key. */
export interface ApiAnswer {
  readonly status: number;
  readonly body: unknown;
  /**
   * Stripe keeps an answer once the endpoint has begun executing: successes, declines, state
   * errors, 500s. Parameters that fail validation, unknown objects named in them, and calls
   * that clash with one in flight are not kept, so the same key can be used again.
   */
  readonly stored: boolean;
}

export interface StripeErrorFields {
  readonly type: "invalid_request_error" | "card_error" | "api_error" | "idempotency_error";
  readonly message: string;
  readonly code?: string;
  readonly param?: string;
  readonly decline_code?: string;
  readonly [extra: string]: unknown;
}

export function errorAnswer(status: number, error: StripeErrorFields, stored: boolean): ApiAnswer {
  const docUrl = error.code ? { doc_url: `https://stripe.com/docs/error-codes/${error.code.replaceAll("_", "-")}` } : {};
  return { status, body: { error: { ...docUrl, ...error } }, stored };
}

/** A parameter that fails validation: 400, never stored. */
export function invalidParam(message: string, param: string, code?: string): ApiAnswer {
  return errorAnswer(400, { type: "invalid_request_error", message, param, ...(code ? { code } : {}) }, false);
}

/** An object named in the URL or a parameter that does not exist: 404 for the URL's, 400 for a parameter's. */
export function noSuch(kind: string, id: string, param: string, status: 400 | 404): ApiAnswer {
  return errorAnswer(status, { type: "invalid_request_error", code: "resource_missing", message: `No such ${kind}: '${id}'`, param }, false);
}

// Stripe's generic answer to an internal error.
export const INTERNAL_ERROR: StripeErrorFields = {
  type: "api_error",
  message: "Sorry, something went wrong. We've already been notified of the problem, but if you need any help, you can reach us at support.stripe.com/contact.",
};

// Largest amount Stripe takes for a charge in most currencies: 99,999,999 minor units ($999,999.99).
export const MAX_AMOUNT = 99_999_999;

export type ParamKind = "string" | "integer" | "boolean" | "metadata" | "list" | { readonly [name: string]: ParamKind };
export type ParamSpec = { readonly [name: string]: ParamKind };

// Stripe's metadata limits: 50 keys, names up to 40 characters, values up to 500.
const METADATA_MAX_KEYS = 50;
const METADATA_MAX_KEY_CHARS = 40;
const METADATA_MAX_VALUE_CHARS = 500;

/** The first parameter that the spec does not know or that has the wrong shape, as Stripe answers it. */
export function checkParams(form: FormObject, spec: ParamSpec, prefix = ""): ApiAnswer | undefined {
  for (const [name, value] of Object.entries(form)) {
    const full = prefix ? `${prefix}[${name}]` : name;
    const kind = spec[name];
    if (kind === undefined) return invalidParam(`Received unknown parameter: ${full}`, full, "parameter_unknown");
    const wrong = checkValue(value, kind, full);
    if (wrong) return wrong;
  }
  return undefined;
}

function checkValue(value: FormValue, kind: ParamKind, name: string): ApiAnswer | undefined {
  if (typeof kind === "object") {
    return typeof value === "string" ? invalidParam("Invalid object", name) : checkParams(value, kind, name);
  }
  switch (kind) {
    case "string":
      return typeof value === "string" ? undefined : invalidParam(`Invalid string: ${JSON.stringify(value)}`, name);
    case "integer":
      return typeof value === "string" && /^-?\d{1,15}$/.test(value) ? undefined : invalidParam(`Invalid integer: ${typeof value === "string" ? value : "{...}"}`, name, "parameter_invalid_integer");
    case "boolean":
      return value === "true" || value === "false" ? undefined : invalidParam(`Invalid boolean: ${typeof value === "string" ? value : "{...}"}`, name);
    case "list":
      return formList(value) ? undefined : invalidParam(`Invalid array`, name);
    case "metadata":
      return checkMetadata(value, name);
  }
}

function checkMetadata(value: FormValue, name: string): ApiAnswer | undefined {
  if (typeof value === "string") return value === "" ? undefined : invalidParam("Invalid object", name);
  const entries = Object.entries(value);
  if (entries.length > METADATA_MAX_KEYS) return invalidParam(`You can specify up to ${METADATA_MAX_KEYS} keys in metadata.`, name);
  for (const [key, item] of entries) {
    if (typeof item !== "string") return invalidParam("Invalid string: {...}", `${name}[${key}]`);
    if (key.length > METADATA_MAX_KEY_CHARS) return invalidParam(`Metadata keys can have up to ${METADATA_MAX_KEY_CHARS} characters.`, `${name}[${key}]`);
    if (item.length > METADATA_MAX_VALUE_CHARS) return invalidParam(`Metadata values can have up to ${METADATA_MAX_VALUE_CHARS} characters.`, `${name}[${key}]`);
  }
  return undefined;
}

/** The metadata of a call: its string entries; `metadata=` (empty) is none. */
export function metadataOf(value: FormValue | undefined): Record<string, string> {
  if (value === undefined || typeof value === "string") return {};
  const out: Record<string, string> = {};
  for (const [key, item] of Object.entries(value)) if (typeof item === "string" && item !== "") out[key] = item;
  return out;
}
