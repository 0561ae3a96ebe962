// The TypeBox schemas: the same objects validate requests and generate /openapi.json.
import { Type as t, type Static } from "@sinclair/typebox";

export const MAX_AMOUNT_CENTS = 2_147_483_647; // Postgres integer, the column's type

export const ChargeBody = t.Object(
  { amountCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS, description: "Amount in cents" }) },
  { additionalProperties: false },
);
export type ChargeBody = Static<typeof ChargeBody>;

export const Charge = t.Object({
  id: t.String({ format: "uuid" }),
  amountCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
  createdAt: t.String({ format: "date-time" }),
});

export const ChargeParams = t.Object({ id: t.String() });

export const Problem = t.Object(
  {
    type: t.String({ format: "uri" }),
    title: t.String(),
    status: t.Integer(),
    detail: t.String(),
    errors: t.Optional(t.Array(t.Object({ field: t.String(), message: t.String() }))),
  },
  { additionalProperties: true },
);

export const IdempotencyKeyHeader = t.String({
  description: 'A UUID, as an RFC 9651 String ("8e03978e-...") or bare; hex case does not matter',
});
