// The relay's PUBACKs, read off the connection before mqtt.js (far cheaper than through it), which
// gets every other packet byte for byte.
import { Duplex } from "node:stream";
import type { PublishWindow } from "./window.ts";

const PUBACK = 4;
const MAX_LENGTH_BYTES = 4;

/** Undefined while `buf` holds only part of the packet at `at`. */
function packetEnd(buf: Buffer, at: number): { body: number; end: number } | undefined {
  let length = 0;
  let multiplier = 1;
  for (let i = at + 1; i < at + 1 + MAX_LENGTH_BYTES; i++) {
    if (i >= buf.length) return undefined;
    const byte = buf[i] as number;
    length += (byte & 0x7f) * multiplier;
    multiplier *= 0x80;
    if ((byte & 0x80) === 0) return buf.length >= i + 1 + length ? { body: i + 1, end: i + 1 + length } : undefined;
  }
  throw new Error("malformed packet from the broker: its remaining length runs past four bytes");
}

export class AckTap extends Duplex {
  private partial: Buffer | undefined;

  constructor(
    private readonly inner: Duplex,
    private readonly listener: Pick<PublishWindow, "acked" | "readDone">,
  ) {
    super({ allowHalfOpen: false });
    inner.on("data", (chunk: Buffer) => this.received(chunk));
    inner.on("end", () => this.push(null));
    inner.on("error", (error: Error) => this.destroy(error));
    inner.on("close", () => this.destroy());
  }

  private received(chunk: Buffer): void {
    const buf = this.partial ? Buffer.concat([this.partial, chunk]) : chunk;
    this.partial = undefined;
    let passFrom = 0;
    let at = 0;
    while (at < buf.length) {
      let packet: { body: number; end: number } | undefined;
      try {
        packet = packetEnd(buf, at);
      } catch (error) {
        this.destroy(error as Error);
        return;
      }
      if (!packet) break;
      if ((buf[at] as number) >> 4 === PUBACK) {
        if (passFrom < at) this.pass(buf.subarray(passFrom, at));
        // MQTT 3.1.1 has no reason code: success.
        const reasonCode = packet.end - packet.body > 2 ? (buf[packet.body + 2] as number) : 0;
        this.listener.acked(buf.readUInt16BE(packet.body), reasonCode);
        passFrom = packet.end;
      }
      at = packet.end;
    }
    if (passFrom < at) this.pass(buf.subarray(passFrom, at));
    if (at < buf.length) this.partial = buf.subarray(at);
    this.listener.readDone();
  }

  private pass(bytes: Buffer): void {
    if (!this.push(bytes)) this.inner.pause();
  }

  override _read(): void {
    this.inner.resume();
  }

  override _write(chunk: Buffer, encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.inner.write(chunk, encoding, callback);
  }

  override _writev(chunks: Array<{ chunk: Buffer }>, callback: (error?: Error | null) => void): void {
    this.inner.write(Buffer.concat(chunks.map((c) => c.chunk)), callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.inner.end(callback);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.inner.destroy(error ?? undefined);
    callback(error);
  }
}
