// Stripe's authentication: a secret key as `Authorization: Bearer sk_…` (or as the user of
// Basic auth, as `curl -u sk_test_…:` sends it). The simulator is test mode: any well-formed
// test key is accepted, and every key sees the same objects; idempotency keys are per API key.
import { errorAnswer, type ApiAnswer } from "./errors.ts";

const TEST_KEY = /^(sk|rk)_test_[A-Za-z0-9_]{1,247}$/;
// How much of a wrong key an error shows: Stripe masks all but the last four characters.
const SHOWN_KEY_CHARS = 4;

export type AuthResult = { readonly ok: true; readonly apiKey: string } | { readonly ok: false; readonly answer: ApiAnswer };

export function authenticate(header: string | undefined): AuthResult {
  const key = keyOf(header);
  if (key === undefined) {
    const message = "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we can help at https://support.stripe.com/.";
    return { ok: false, answer: errorAnswer(401, { type: "invalid_request_error", message }, false) };
  }
  if (TEST_KEY.test(key)) return { ok: true, apiKey: key };
  const masked = key.length > SHOWN_KEY_CHARS ? `${key.slice(0, key.indexOf("_", 3) + 1)}${"*".repeat(8)}${key.slice(-SHOWN_KEY_CHARS)}` : "****";
  const live = /^(sk|rk)_live_/.test(key) ? " The simulator takes test-mode keys (sk_test_…) only." : "";
  return { ok: false, answer: errorAnswer(401, { type: "invalid_request_error", message: `Invalid API Key provided: ${masked}${live}` }, false) };
}

function keyOf(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const [scheme, value, ...rest] = header.trim().split(/\s+/);
  if (!value || rest.length > 0) return header.trim() === "" ? undefined : "";
  if (scheme?.toLowerCase() === "bearer") return value;
  if (scheme?.toLowerCase() !== "basic") return "";
  const decoded = Buffer.from(value, "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  return colon === -1 ? decoded : decoded.slice(0, colon);
}
