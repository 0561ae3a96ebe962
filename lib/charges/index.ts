// The route table of the idempotent operations, one line each: the API serves their routes, and
// the operations jobs (the completer, `bun run ops parked|resolve`) find a key's steps by its endpoint.
import { cancelCharge } from "./cancel.ts";
import { captureCharge } from "./capture.ts";
import { createCharge } from "./charges.ts";
import { endpointOf, type Operation } from "../idempotency/model.ts";
import { incrementAuthorization } from "./increment-authorization.ts";
import { createRefund } from "./refunds.ts";

export const OPERATIONS: readonly Operation[] = [
  createCharge,
  createRefund,
  captureCharge,
  cancelCharge,
  incrementAuthorization,
];

export function foreignOperations(): ReadonlyMap<string, Operation> {
  return new Map(OPERATIONS.filter((op) => op.foreign !== undefined).map((op) => [endpointOf(op), op]));
}
