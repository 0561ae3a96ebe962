// The bytes of the relay's one kind of packet: a QoS 1 PUBLISH (MQTT 5 §3.3, or 3.1.1 §3.3
// without the properties). mqtt-packet's generate() writes the same bytes (test/publish-packet
// .test.ts compares them) but costs several times as much per message through its chunk
// accumulator and per-property dispatch (bench/README.md, "Relay drain"); this sizes the
// packet once and writes it into one buffer.

export interface PublishFields {
  /** Packet identifier, 1..65535. */
  readonly messageId: number;
  readonly topic: string;
  /** UTF-8 text. */
  readonly payload: string;
  /** MQTT 5 only. */
  readonly contentType: string;
  /** MQTT 5 only; each name and value once. */
  readonly userProperties: Readonly<Record<string, string>>;
}

// Fixed header byte: type 3 (PUBLISH) in the high nibble, QoS 1 in bits 1-2, DUP and RETAIN clear.
const PUBLISH_QOS1 = 0x32;
// MQTT 5 property identifiers (§2.2.2.2).
const CONTENT_TYPE = 0x03;
const USER_PROPERTY = 0x26;
// A UTF-8 string is prefixed by its length in two bytes (§1.5.4).
const MAX_STRING_BYTES = 0xffff;
// The largest Remaining Length four variable-length bytes can say (§1.5.5).
const MAX_REMAINING_LENGTH = 268_435_455;

/** A message the protocol cannot carry (a string or the packet too long). */
export class UnencodableMessage extends Error {
  override name = "UnencodableMessage";
}

function varintSize(n: number): number {
  return n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : 4;
}

function writeVarint(buf: Buffer, at: number, value: number): number {
  let n = value;
  let o = at;
  do {
    let byte = n % 0x80;
    n = Math.floor(n / 0x80);
    if (n > 0) byte |= 0x80;
    buf[o++] = byte;
  } while (n > 0);
  return o;
}

function stringBytes(s: string): number {
  const n = Buffer.byteLength(s);
  if (n > MAX_STRING_BYTES) throw new UnencodableMessage(`an MQTT string of ${n} bytes (at most ${MAX_STRING_BYTES})`);
  return n;
}

function writeString(buf: Buffer, at: number, s: string, bytes: number): number {
  buf.writeUInt16BE(bytes, at);
  buf.write(s, at + 2, bytes, "utf8");
  return at + 2 + bytes;
}

function propertiesSize(fields: PublishFields): number {
  let size = 3 + stringBytes(fields.contentType);
  for (const name in fields.userProperties) size += 5 + stringBytes(name) + stringBytes(fields.userProperties[name] as string);
  return size;
}

function writeProperties(buf: Buffer, at: number, fields: PublishFields, size: number): number {
  let o = writeVarint(buf, at, size);
  buf[o++] = CONTENT_TYPE;
  o = writeString(buf, o, fields.contentType, Buffer.byteLength(fields.contentType));
  for (const name in fields.userProperties) {
    const value = fields.userProperties[name] as string;
    buf[o++] = USER_PROPERTY;
    o = writeString(buf, o, name, Buffer.byteLength(name));
    o = writeString(buf, o, value, Buffer.byteLength(value));
  }
  return o;
}

/** The whole packet; `protocolVersion` 4 (3.1.1) leaves the properties out. Throws UnencodableMessage. */
export function encodePublish(fields: PublishFields, protocolVersion: number): Buffer {
  const topicBytes = stringBytes(fields.topic);
  const payloadBytes = Buffer.byteLength(fields.payload);
  const propsSize = protocolVersion === 5 ? propertiesSize(fields) : -1;
  const propsTotal = propsSize < 0 ? 0 : varintSize(propsSize) + propsSize;
  const remaining = 2 + topicBytes + 2 + propsTotal + payloadBytes;
  if (remaining > MAX_REMAINING_LENGTH) throw new UnencodableMessage(`a PUBLISH of ${remaining} bytes (MQTT allows ${MAX_REMAINING_LENGTH})`);
  const buf = Buffer.allocUnsafe(1 + varintSize(remaining) + remaining);
  buf[0] = PUBLISH_QOS1;
  let o = writeVarint(buf, 1, remaining);
  o = writeString(buf, o, fields.topic, topicBytes);
  buf.writeUInt16BE(fields.messageId, o);
  o += 2;
  if (propsSize >= 0) o = writeProperties(buf, o, fields, propsSize);
  buf.write(fields.payload, o, payloadBytes, "utf8");
  return buf;
}
