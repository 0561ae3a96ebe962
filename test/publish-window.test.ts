// The relay's PublishWindow (lib/relay/window.ts) on a recorded connection: the packets it
// writes, the Receive Maximum it keeps, and the PINGREQ it sends to carry a TCP ACK when it
// runs out of publishes with PUBACKs still to come (Mosquitto, by default without TCP_NODELAY,
// holds its next PUBACKs until its last segment is ACKed; bench/README.md, "Relay drain", has
// the stall it caused). The relay tests run the same window against a real Mosquitto.
import { expect, test } from "bun:test";
import { ConnectionLost, PublishRefused, PublishWindow, type OutboundMessage } from "../lib/relay/window.ts";

const PINGREQ = Buffer.from([0xc0, 0x00]);
// A PUBLISH's fixed header with QoS 1.
const PUBLISH_QOS1 = 0x32;

function recorded(receiveMaximum = 2): { window: PublishWindow; writes: Buffer[]; packets(): number[] } {
  const writes: Buffer[] = [];
  const window = new PublishWindow({ connected: true, protocolVersion: 5, write: (bytes) => void writes.push(bytes) }, 1000);
  window.opened(receiveMaximum);
  // The first byte of each packet written, in order (PUBLISH 0x32, PINGREQ 0xc0).
  const packets = (): number[] => {
    const all = Buffer.concat(writes);
    const types: number[] = [];
    for (let at = 0; at < all.length; ) {
      types.push(all[at] as number);
      let length = 0;
      let shift = 1;
      let i = at + 1;
      for (;;) {
        const byte = all[i++] as number;
        length += (byte & 0x7f) * shift;
        shift *= 0x80;
        if ((byte & 0x80) === 0) break;
      }
      at = i + length;
    }
    return types;
  };
  return { window, writes, packets };
}

const message = (n: number): OutboundMessage => ({ key: `aggregate-${n}`, topic: "t/ChargeCreated", payload: `{"n":${n}}`, userProperties: { "event-id": String(n) } });
const turn = (): Promise<void> => new Promise((resolve) => process.nextTick(resolve));

test("publishes of one turn leave in one write, at most the Receive Maximum unacknowledged", async () => {
  const { window, writes, packets } = recorded(2);
  const settled = [1, 2, 3].map((n) => window.publish(message(n)));
  await turn();
  expect(writes).toHaveLength(1);
  expect(packets()).toEqual([PUBLISH_QOS1, PUBLISH_QOS1]);
  window.acked(1, 0);
  window.readDone();
  await turn();
  expect(packets()).toEqual([PUBLISH_QOS1, PUBLISH_QOS1, PUBLISH_QOS1]);
  window.acked(2, 0x10); // no matching subscribers: accepted
  window.acked(3, 0x87);
  await expect(settled[0]).resolves.toBeUndefined();
  await expect(settled[1]).resolves.toBeUndefined();
  await expect(settled[2]).rejects.toBeInstanceOf(PublishRefused);
});

test("out of publishes with PUBACKs still to come: one PINGREQ per read, none once all are in", async () => {
  const { window, writes, packets } = recorded(20);
  for (const n of [1, 2, 3]) void window.publish(message(n));
  await turn();
  window.acked(1, 0);
  window.readDone(); // nothing left to send, 2 in flight: the ACK must not wait
  await turn();
  expect(packets()).toEqual([PUBLISH_QOS1, PUBLISH_QOS1, PUBLISH_QOS1, 0xc0]);
  expect(writes.at(-1)?.equals(PINGREQ)).toBe(true);
  window.readDone(); // a read with no PUBACK (the PINGRESP): no second ping for the same PUBACK
  await turn();
  expect(packets().filter((p) => p === 0xc0)).toHaveLength(1);
  window.acked(2, 0);
  window.readDone();
  await turn();
  expect(packets().filter((p) => p === 0xc0)).toHaveLength(2);
  window.acked(3, 0);
  window.readDone(); // nothing in flight: nothing owed
  await turn();
  expect(packets().filter((p) => p === 0xc0)).toHaveLength(2);
});

test("a read that frees slots for waiting publishes sends them, not a PINGREQ", async () => {
  const { window, packets } = recorded(1);
  for (const n of [1, 2]) void window.publish(message(n));
  await turn();
  window.acked(1, 0);
  window.readDone();
  await turn();
  expect(packets()).toEqual([PUBLISH_QOS1, PUBLISH_QOS1]);
});

test("a publish sent from a PUBACK's callback (the next row of a chain) carries the ACK: no PINGREQ with it", async () => {
  const { window, packets } = recorded(20);
  // Two publishes in flight; the first's PUBACK hands over the next, as a chain of rows does.
  window.deliver(message(1), () => window.deliver(message(3), () => {}));
  window.deliver(message(2), () => {});
  await turn();
  window.acked(1, 0);
  window.readDone();
  await turn();
  expect(packets()).toEqual([PUBLISH_QOS1, PUBLISH_QOS1, PUBLISH_QOS1]);
});

test("a lost connection fails every publish, the oldest in flight with the DISCONNECT's reason", async () => {
  const { window } = recorded(1);
  const settled = [1, 2].map((n) => window.publish(message(n)).catch((error: unknown) => error));
  await turn();
  window.closed(0x95);
  const [oldest, waiting] = (await Promise.all(settled)) as ConnectionLost[];
  expect(oldest).toMatchObject({ code: 0x95, oldestInFlight: true });
  expect(waiting).toMatchObject({ code: undefined, oldestInFlight: false });
});
