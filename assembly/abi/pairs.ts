// The proxy-wasm header-pairs encoding (little-endian): u32 count, then count
// x (u32 key length, u32 value length), then every key and value each followed
// by a NUL that the lengths do not count.

/** Walks an encoded pairs buffer in place, without allocating per header. */
export class PairsReader {
  private count: u32 = 0;
  private index: u32 = 0;
  private sizes: usize = 0;
  private cursor: usize = 0;
  private end: usize = 0;
  keyPtr: usize = 0;
  keyLen: i32 = 0;
  valuePtr: usize = 0;
  valueLen: i32 = 0;

  /** Returns false if the buffer is too short for its own header. */
  reset(ptr: usize, len: i32): bool {
    this.index = 0;
    this.count = 0;
    if (len < 4) return false;
    const count = load<u32>(ptr);
    if (<u64>count * 8 + 4 > <u64>len) return false;
    this.count = count;
    this.sizes = ptr + 4;
    this.cursor = ptr + 4 + (<usize>count) * 8;
    this.end = ptr + <usize>len;
    return true;
  }

  /** Advances to the next pair; false at the end or on a truncated buffer. */
  next(): bool {
    if (this.index >= this.count) return false;
    const k = load<u32>(this.sizes + (<usize>this.index) * 8);
    const v = load<u32>(this.sizes + (<usize>this.index) * 8 + 4);
    const need = <u64>k + <u64>v + 2;
    if (<u64>this.cursor + need > <u64>this.end) {
      this.index = this.count;
      return false;
    }
    this.keyPtr = this.cursor;
    this.keyLen = <i32>k;
    this.valuePtr = this.cursor + k + 1;
    this.valueLen = <i32>v;
    this.cursor += <usize>need;
    this.index++;
    return true;
  }
}

/** Encodes name/value pairs (flattened: name0, value0, name1, value1...). */
export function encodePairs(flat: string[]): ArrayBuffer {
  const n = flat.length >> 1;
  const parts = new Array<ArrayBuffer>(flat.length);
  let total = 4 + n * 8;
  for (let i = 0; i < flat.length; i++) {
    parts[i] = String.UTF8.encode(flat[i]);
    total += parts[i].byteLength + 1;
  }
  const out = new ArrayBuffer(total);
  const base = changetype<usize>(out);
  store<u32>(base, n);
  let cursor = base + 4 + <usize>n * 8;
  for (let i = 0; i < flat.length; i++) {
    const part = parts[i];
    store<u32>(base + 4 + <usize>i * 4, part.byteLength);
    memory.copy(cursor, changetype<usize>(part), part.byteLength);
    cursor += part.byteLength;
    store<u8>(cursor, 0);
    cursor++;
  }
  return out;
}
