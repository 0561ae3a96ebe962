// The relay's PUBLISH encoder (lib/relay/publish-packet.ts) against mqtt-packet, the encoder
// mqtt.js itself uses: the same bytes for every shape of message the relay sends, on MQTT 5
// and 3.1.1, across every width of the remaining-length field.
import { expect, test } from "bun:test";
import mqttPacket from "mqtt-packet";
import { encodePublish, UnencodableMessage, type PublishFields } from "../lib/relay/publish-packet.ts";
import { CHARGE_CREATED, EVENT_CONTENT_TYPE, topicOf, userPropertiesOf } from "../lib/charges/events.ts";

function reference(fields: PublishFields, protocolVersion: 4 | 5): Buffer {
  return mqttPacket.generate(
    {
      cmd: "publish",
      topic: fields.topic,
      payload: fields.payload,
      qos: 1,
      dup: false,
      retain: false,
      messageId: fields.messageId,
      properties: { contentType: fields.contentType, userProperties: { ...fields.userProperties } },
    },
    { protocolVersion },
  );
}

function message(payloadChars: number, traceparent: string | null, tenantId = "tenant-a", prefix = "charges/"): PublishFields {
  const id = crypto.randomUUID();
  return {
    messageId: 1 + Math.floor(Math.random() * 0xffff),
    topic: topicOf(prefix, CHARGE_CREATED),
    payload: JSON.stringify({ id, pad: "é".repeat(Math.floor(payloadChars / 2)) + "x".repeat(payloadChars % 2) }),
    contentType: EVENT_CONTENT_TYPE,
    userProperties: userPropertiesOf({ id, type: CHARGE_CREATED, tenantId, sequence: 1, traceparent }),
  };
}

// Payload sizes on both sides of each remaining-length width: 1, 2, 3 and 4 bytes.
const SIZES = [0, 1, 40, 60, 100, 127, 128, 8000, 8191, 8192, 16383, 16384, 1_048_576, 2_097_152];

test("the same bytes as mqtt-packet, MQTT 5 and 3.1.1, every remaining-length width", () => {
  for (const size of SIZES)
    for (const traceparent of [null, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"])
      for (const version of [5, 4] as const) {
        const fields = message(size, traceparent);
        const ours = encodePublish(fields, version);
        expect({ size, version, same: ours.equals(reference(fields, version)) }).toEqual({ size, version, same: true });
      }
});

test("multi-byte UTF-8 in the topic, the tenant and the payload is counted in bytes", () => {
  const fields = message(300, null, "tenant-ü-日本", "dép/");
  expect(encodePublish(fields, 5).equals(reference(fields, 5))).toBe(true);
});

test("packet identifiers at both ends of their range", () => {
  for (const messageId of [1, 255, 256, 65535]) {
    const fields = { ...message(10, null), messageId };
    expect(encodePublish(fields, 5).equals(reference(fields, 5))).toBe(true);
  }
});

test("a property value longer than an MQTT string can be is refused, not truncated", () => {
  const fields = message(10, null, "t".repeat(70_000));
  expect(() => encodePublish(fields, 5)).toThrow(UnencodableMessage);
  // 3.1.1 sends no properties: the same message is fine there.
  expect(encodePublish(fields, 4).equals(reference(fields, 4))).toBe(true);
});
