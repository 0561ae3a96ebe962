// A QoS 1 PUBLISH (MQTT 5 §3.3, or 3.1.1 without the properties): the bytes of mqtt-packet's
// generate() at a fraction of the cost, sized once and written into one buffer.

export interface PublishFields {
  readonly messageId: number;
  readonly topic: string;
  readonly payload: string;
  /** MQTT 5 only, with the user properties. */
  readonly contentType: string;
  readonly userProperties: Readonly<Record<string, string>>;
}

// Type 3 (PUBLISH) in the high nibble, QoS 1 in bits 1-2, DUP and RETAIN clear.
const PUBLISH_QOS1 = 0x32;
const CONTENT_TYPE = 0x03;
const USER_PROPERTY = 0x26;
const MAX_STRING_BYTES = 0xffff;
const MAX_REMAINING_LENGTH = 268_435_455;

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

// Short ASCII strings are measured and copied by a loop, cheaper than native Buffer calls up to here.
const ASCII_LOOP_MAX = 64;
const FIRST_NON_ASCII = 0x80;

function utf8Bytes(s: string): number {
  if (s.length > ASCII_LOOP_MAX) return Buffer.byteLength(s);
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) >= FIRST_NON_ASCII) return Buffer.byteLength(s);
  return s.length;
}

function stringBytes(s: string): number {
  const n = utf8Bytes(s);
  if (n > MAX_STRING_BYTES) throw new UnencodableMessage(`an MQTT string of ${n} bytes (at most ${MAX_STRING_BYTES})`);
  return n;
}

function writeUtf8(buf: Buffer, at: number, s: string, bytes: number): number {
  if (bytes === s.length && bytes <= ASCII_LOOP_MAX) for (let i = 0; i < bytes; i++) buf[at + i] = s.charCodeAt(i);
  else buf.write(s, at, bytes, "utf8");
  return at + bytes;
}

function writeString(buf: Buffer, at: number, s: string, bytes: number): number {
  buf[at] = bytes >> 8;
  buf[at + 1] = bytes & 0xff;
  return writeUtf8(buf, at + 2, s, bytes);
}

// From propertiesSize to writeProperties of one packet: the encoder never yields in between.
const propertyBytes: number[] = [];

function propertiesSize(fields: PublishFields, contentTypeBytes: number): number {
  let size = 3 + contentTypeBytes;
  let k = 0;
  for (const name in fields.userProperties) {
    const nameBytes = stringBytes(name);
    const valueBytes = stringBytes(fields.userProperties[name] as string);
    propertyBytes[k++] = nameBytes;
    propertyBytes[k++] = valueBytes;
    size += 5 + nameBytes + valueBytes;
  }
  return size;
}

function writeProperties(buf: Buffer, at: number, fields: PublishFields, size: number, contentTypeBytes: number): number {
  let o = writeVarint(buf, at, size);
  buf[o++] = CONTENT_TYPE;
  o = writeString(buf, o, fields.contentType, contentTypeBytes);
  let k = 0;
  for (const name in fields.userProperties) {
    const value = fields.userProperties[name] as string;
    buf[o++] = USER_PROPERTY;
    o = writeString(buf, o, name, propertyBytes[k++] as number);
    o = writeString(buf, o, value, propertyBytes[k++] as number);
  }
  return o;
}

export function encodePublish(fields: PublishFields, protocolVersion: number): Buffer {
  const topicBytes = stringBytes(fields.topic);
  const payloadBytes = utf8Bytes(fields.payload);
  const contentTypeBytes = protocolVersion === 5 ? stringBytes(fields.contentType) : 0;
  const propsSize = protocolVersion === 5 ? propertiesSize(fields, contentTypeBytes) : -1;
  const propsTotal = propsSize < 0 ? 0 : varintSize(propsSize) + propsSize;
  const remaining = 2 + topicBytes + 2 + propsTotal + payloadBytes;
  if (remaining > MAX_REMAINING_LENGTH) throw new UnencodableMessage(`a PUBLISH of ${remaining} bytes (MQTT allows ${MAX_REMAINING_LENGTH})`);
  const buf = Buffer.allocUnsafe(1 + varintSize(remaining) + remaining);
  buf[0] = PUBLISH_QOS1;
  let o = writeVarint(buf, 1, remaining);
  o = writeString(buf, o, fields.topic, topicBytes);
  buf[o++] = fields.messageId >> 8;
  buf[o++] = fields.messageId & 0xff;
  if (propsSize >= 0) o = writeProperties(buf, o, fields, propsSize, contentTypeBytes);
  writeUtf8(buf, o, fields.payload, payloadBytes);
  return buf;
}
