// The base of every problem type's URI, and the problems a foreign step stores under a key:
// written by the API and by the completer alike (lib/shared/processor/), so they live here
// rather than in lib/api/problem.ts, which spreads them into its table.

export const PROBLEM_BASE = "https://charges.example/problems/";

export const STORED_PROBLEMS = {
  cardDeclined: { slug: "card-declined", title: "Card declined", status: 402 },
  refundRefused: { slug: "refund-refused", title: "Refund refused by the payment processor", status: 422 },
} as const;

/** An RFC 9457 body as JSON text, members in a fixed order (stored and replayed byte for byte). */
export function problemJson(spec: { readonly slug: string; readonly title: string; readonly status: number }, detail: string, extensions: Record<string, unknown> = {}): string {
  return JSON.stringify({ type: PROBLEM_BASE + spec.slug, title: spec.title, status: spec.status, detail, ...extensions });
}
