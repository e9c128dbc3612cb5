/** Reads the varints and little-endian words of the links' own packings (inside bytes fields); throws, naming the fault and `what`, past the end. */
export class ByteReader {
  at = 0;

  constructor(
    private readonly bytes: Uint8Array,
    private readonly what: string,
  ) {}

  get more(): boolean {
    return this.at < this.bytes.byteLength;
  }

  /** Up to 35 bits (every figure the links send fits). */
  varint(): number {
    let v = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      if (this.at >= this.bytes.byteLength) break;
      const b = this.bytes[this.at++];
      v += (b & 0x7f) * 2 ** shift;
      if ((b & 0x80) === 0) return v;
    }
    throw new Error(`${this.what}: bad varint at byte ${this.at}`);
  }

  /** Moves past `n` bytes (fixed-width fields read as a whole elsewhere). */
  skip(n: number): void {
    if (this.at + n > this.bytes.byteLength) throw new Error(`${this.what}: truncated at byte ${this.at}`);
    this.at += n;
  }
}
