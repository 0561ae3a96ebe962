// Every foreign process by its key's endpoint: what the completer can finish without a client.
import type { ForeignProcess } from "../foreign/types.ts";
import { chargeProcess } from "./charge.ts";
import { refundProcess } from "./refund.ts";

export const FOREIGN_PROCESSES: ReadonlyMap<string, ForeignProcess> = new Map([chargeProcess, refundProcess].map((p) => [p.endpoint, p]));
