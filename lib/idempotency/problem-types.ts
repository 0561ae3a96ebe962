// The base of every problem type's URI, and the problems an operation declares: its refusals
// and what its steps store under a key, written by the API and by the completer alike
// (the domain's operations), so they live here; the API spreads them into its problem table.

export const PROBLEM_BASE = "https://charges.example/problems/";

/** One problem type: its URI's last segment, its title and its status. */
export interface ProblemSpec {
  readonly slug: string;
  readonly title: string;
  readonly status: number;
}

/** The problems an operation may answer for its own refusals (beside its own types). */
export const OPERATION_PROBLEMS = {
  invalidBody: { slug: "invalid-body", title: "Invalid request body", status: 400 },
  notFound: { slug: "not-found", title: "Not found", status: 404 },
  refundExceedsCharge: { slug: "refund-exceeds-charge", title: "Refund exceeds what is left of the charge", status: 422 },
  chargeNotRefundable: { slug: "charge-not-refundable", title: "Charge not refundable", status: 422 },
} as const satisfies Record<string, ProblemSpec>;

export const STORED_PROBLEMS = {
  cardDeclined: { slug: "card-declined", title: "Card declined", status: 402 },
  refundRefused: { slug: "refund-refused", title: "Refund refused by the payment processor", status: 422 },
} as const satisfies Record<string, ProblemSpec>;

/** An RFC 9457 body as JSON text, members in a fixed order (stored and replayed byte for byte). */
export function problemJson(spec: ProblemSpec, detail: string, extensions: Record<string, unknown> = {}): string {
  return JSON.stringify({ type: PROBLEM_BASE + spec.slug, title: spec.title, status: spec.status, detail, ...extensions });
}
