// A checkout with charges-outbox/client: `bun examples/checkout.ts <order id> <amount in cents>`.
// The order id is the intent: its key is kept in a JSON file (FileKeyStore), so running the
// same order again, after a crash, a timeout or a lost answer, resumes the same key and gets
// the charge the first run created (replayed: true), never a second one. Prints one JSON
// line. Exit 0 charged; 75 (EX_TEMPFAIL) no final answer yet: run it again with the same
// order; 1 refused (the problem says why; running it again will not help).
// Environment: API_URL (default http://localhost:3000), API_TOKEN (`bun run token` prints
// one), CHECKOUT_KEYS (default .checkout-keys.json), CHECKOUT_DEADLINE_MS (default 30000).
import { ChargesApiError, ChargesClient } from "charges-outbox/client";
import { FileKeyStore } from "charges-outbox/client/file-store";

const EX_TEMPFAIL = 75;

export interface CheckoutResult {
  readonly code: 0 | 1 | typeof EX_TEMPFAIL;
  readonly line: Record<string, unknown>;
}

/** Charges `amountCents` for `orderId`, once, whatever happened to the runs before this one. */
export async function checkout(orderId: string, amountCents: number, env: Record<string, string | undefined>): Promise<CheckoutResult> {
  const client = new ChargesClient({
    baseUrl: env.API_URL ?? "http://localhost:3000",
    token: env.API_TOKEN ?? "",
    keyStore: new FileKeyStore(env.CHECKOUT_KEYS ?? ".checkout-keys.json"),
  });
  try {
    const deadlineMs = Number(env.CHECKOUT_DEADLINE_MS ?? 30_000);
    const { charge, replayed, attempts } = await client.charges.create({ amountCents }, { intentId: `checkout:${orderId}`, deadlineMs });
    return { code: 0, line: { order: orderId, charged: charge.id, amountCents: charge.amountCents, replayed, attempts } };
  } catch (error) {
    if (!(error instanceof ChargesApiError)) throw error;
    const line = { order: orderId, problem: error.type, status: error.status, detail: error.detail, idempotencyKey: error.idempotencyKey };
    return { code: error.retryable ? EX_TEMPFAIL : 1, line: { ...line, retryable: error.retryable } };
  }
}

if (import.meta.main) {
  const [orderId, amount] = process.argv.slice(2);
  const amountCents = Number(amount);
  if (!orderId || !Number.isSafeInteger(amountCents) || amountCents < 1) {
    console.error("usage: bun examples/checkout.ts <order id> <amount in cents>");
    process.exit(1);
  }
  const { code, line } = await checkout(orderId, amountCents, process.env);
  console.log(JSON.stringify(line));
  process.exit(code);
}
