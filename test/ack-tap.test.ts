// The PUBACK tap (lib/relay/ack-tap.ts) on byte streams cut at every possible place: whatever
// way TCP splits the broker's bytes, each PUBACK reaches the relay once with its identifier and
// reason code, and every other packet reaches mqtt.js byte for byte, in order. The relay tests
// run the same tap against a real Mosquitto (relay.test.ts, relay-poison.test.ts, relay-outages.test.ts).
import { expect, test } from "bun:test";
import mqttPacket from "mqtt-packet";
import { Duplex, PassThrough } from "node:stream";
import { AckTap } from "../lib/relay/ack-tap.ts";

const v5 = { protocolVersion: 5 };
const puback = (messageId: number, reasonCode?: number): Buffer =>
  mqttPacket.generate({ cmd: "puback", messageId, ...(reasonCode === undefined ? {} : { reasonCode }) }, v5);
// A CONNACK with properties and a DISCONNECT with a reason string: packets mqtt.js must see.
const connack = mqttPacket.generate({ cmd: "connack", reasonCode: 0, sessionPresent: false, properties: { receiveMaximum: 20 } }, v5);
const disconnect = mqttPacket.generate({ cmd: "disconnect", reasonCode: 0x95, properties: { reasonString: "x".repeat(200) } }, v5);
const pingresp = mqttPacket.generate({ cmd: "pingresp" }, v5);

const stream = Buffer.concat([connack, puback(1), puback(2, 0x10), pingresp, puback(65535, 0x87), puback(7), disconnect]);
const expectedAcks = [
  [1, 0],
  [2, 0x10],
  [65535, 0x87],
  [7, 0],
];
const expectedPassed = Buffer.concat([connack, pingresp, disconnect]);

async function feed(chunks: Buffer[]): Promise<{ acks: number[][]; passed: Buffer }> {
  const inner = new PassThrough();
  const acks: number[][] = [];
  const tap = new AckTap(inner, { acked: (id, code) => acks.push([id, code]), readDone: () => {} });
  const passed: Buffer[] = [];
  tap.on("data", (b: Buffer) => passed.push(b));
  const ended = new Promise((resolve) => tap.on("end", resolve));
  for (const chunk of chunks) inner.write(chunk);
  inner.end();
  await ended;
  return { acks, passed: Buffer.concat(passed) };
}

test("one chunk: the PUBACKs are taken off, the rest passes through unchanged", async () => {
  const { acks, passed } = await feed([stream]);
  expect(acks).toEqual(expectedAcks);
  expect(passed.equals(expectedPassed)).toBe(true);
});

test("cut in two at every byte: the same PUBACKs and the same bytes", async () => {
  for (let cut = 1; cut < stream.length; cut++) {
    const { acks, passed } = await feed([stream.subarray(0, cut), stream.subarray(cut)]);
    expect({ cut, acks }).toEqual({ cut, acks: expectedAcks });
    expect({ cut, same: passed.equals(expectedPassed) }).toEqual({ cut, same: true });
  }
});

test("one byte at a time (a remaining length split across reads too)", async () => {
  const { acks, passed } = await feed([...stream].map((byte) => Buffer.from([byte])));
  expect(acks).toEqual(expectedAcks);
  expect(passed.equals(expectedPassed)).toBe(true);
});

test("MQTT 3.1.1 PUBACKs (no reason code) are successes", async () => {
  const { acks } = await feed([mqttPacket.generate({ cmd: "puback", messageId: 42 }, { protocolVersion: 4 })]);
  expect(acks).toEqual([[42, 0]]);
});

test("a remaining length longer than four bytes ends the connection with an error", async () => {
  const inner = new PassThrough();
  const tap = new AckTap(inner, { acked: () => {}, readDone: () => {} });
  const failed = new Promise<Error>((resolve) => tap.on("error", resolve));
  inner.write(Buffer.from([0x40, 0xff, 0xff, 0xff, 0xff, 0x01]));
  expect((await failed).message).toContain("remaining length");
  expect(inner.destroyed).toBe(true);
});

test("writes reach the connection unchanged", async () => {
  const written: Buffer[] = [];
  const inner = new Duplex({
    read() {},
    write(chunk: Buffer, _encoding, callback) {
      written.push(chunk);
      callback();
    },
  });
  const tap = new AckTap(inner, { acked: () => {}, readDone: () => {} });
  const publish = mqttPacket.generate({ cmd: "publish", topic: "t/x", payload: "{}", qos: 1, dup: false, retain: false, messageId: 9 }, v5);
  tap.write(publish);
  await new Promise<void>((resolve) => tap.write(pingresp, () => resolve()));
  expect(Buffer.concat(written).equals(Buffer.concat([publish, pingresp]))).toBe(true);
});
