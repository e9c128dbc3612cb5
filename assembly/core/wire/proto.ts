// Minimal protobuf wire-format reader and writer: just what the snapshot
// stream needs. Malformed input sets `ok = false` instead of trapping.
import { firstInvalidUtf8 } from "./utf8";

export const enum WireType { Varint = 0, Fixed64 = 1, Bytes = 2, Fixed32 = 5 }

export class ProtoReader {
  ok: bool = true;

  constructor(private pos: usize, readonly end: usize) {}

  /** Where the reader stands (a nested message's first byte, for one read with message()). */
  get start(): usize {
    return this.pos;
  }

  static over(ptr: usize, len: i32): ProtoReader {
    return new ProtoReader(ptr, ptr + <usize>len);
  }

  more(): bool {
    return this.ok && this.pos < this.end;
  }

  varint(): u64 {
    let result: u64 = 0;
    for (let shift: u64 = 0; shift < 64; shift += 7) {
      if (this.pos >= this.end) break;
      const b = load<u8>(this.pos++);
      result |= (<u64>(b & 0x7f)) << shift;
      if ((b & 0x80) == 0) return result;
    }
    this.ok = false;
    return 0;
  }

  /** Eight bytes, little-endian (a fixed64 field's value, or a packed entry's). */
  fixed64(): u64 {
    if (this.pos + 8 > this.end) {
      this.ok = false;
      return 0;
    }
    const v = load<u64>(this.pos);
    this.pos += 8;
    return v;
  }

  float(): f32 {
    if (this.pos + 4 > this.end) {
      this.ok = false;
      return 0;
    }
    const v = load<f32>(this.pos);
    this.pos += 4;
    return v;
  }

  /**
   * Reads a length-delimited field and returns a reader over its bytes. An
   * error inside the nested message shows only in the sub-reader's `ok`, so
   * callers must check it too; a bad length gives a sub-reader already not ok.
   */
  message(): ProtoReader {
    const len = this.varint();
    if (!this.ok || len > <u64>(this.end - this.pos)) {
      this.ok = false;
      const bad = new ProtoReader(0, 0);
      bad.ok = false;
      return bad;
    }
    const sub = new ProtoReader(this.pos, this.pos + <usize>len);
    this.pos += <usize>len;
    return sub;
  }

  /** A string field; proto3 requires valid UTF-8, and the lax decoder could map bad bytes onto a real name. */
  string(): string {
    const len = this.varint();
    if (!this.ok || len > <u64>(this.end - this.pos) || firstInvalidUtf8(this.pos, 0, <i32>len) >= 0) {
      this.ok = false;
      return "";
    }
    const s = String.UTF8.decodeUnsafe(this.pos, <usize>len);
    this.pos += <usize>len;
    return s;
  }

  skip(wire: u32): void {
    if (wire == WireType.Varint) {
      this.varint();
    } else if (wire == WireType.Fixed64) {
      this.advance(8);
    } else if (wire == WireType.Fixed32) {
      this.advance(4);
    } else if (wire == WireType.Bytes) {
      const len = this.varint();
      if (this.ok && len <= <u64>(this.end - this.pos)) this.pos += <usize>len;
      else this.ok = false;
    } else {
      this.ok = false;
    }
  }

  private advance(n: usize): void {
    if (this.pos + n > this.end) this.ok = false;
    else this.pos += n;
  }
}

/** Appends protobuf fields to a growable byte array. */
export class ProtoWriter {
  private bytes: u8[] = [];

  varintField(field: u32, value: u64): void {
    this.varint((<u64>field << 3) | WireType.Varint);
    this.varint(value);
  }

  stringField(field: u32, value: string): void {
    this.bytesField(field, String.UTF8.encode(value));
  }

  bytesField(field: u32, value: ArrayBuffer): void {
    const view = Uint8Array.wrap(value);
    this.varint((<u64>field << 3) | WireType.Bytes);
    this.varint(<u64>view.length);
    for (let i = 0; i < view.length; i++) this.bytes.push(view[i]);
  }

  get length(): i32 {
    return this.bytes.length;
  }

  finish(): ArrayBuffer {
    const out = new ArrayBuffer(this.bytes.length);
    for (let i = 0; i < this.bytes.length; i++) store<u8>(changetype<usize>(out) + <usize>i, this.bytes[i]);
    return out;
  }

  /** Eight bytes, little-endian, with no tag (inside a bytes field of our own packing). */
  fixed64(v: u64): void {
    for (let i: u64 = 0; i < 64; i += 8) this.bytes.push(<u8>(v >> i));
  }

  /** A varint with no tag (inside a bytes field of our own packing). */
  varint(v: u64): void {
    while (v >= 0x80) {
      this.bytes.push(<u8>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    this.bytes.push(<u8>v);
  }
}
