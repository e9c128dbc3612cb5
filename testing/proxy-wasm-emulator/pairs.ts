// The proxy-wasm serialized map (header pairs), little-endian: u32 count,
// then count x (u32 key length, u32 value length), then each key and value
// followed by a NUL the lengths do not count.

export type Pair = readonly [string, string];

export function encodePairs(pairs: readonly Pair[]): Uint8Array {
  const encoded = pairs.map(([k, v]) => [Buffer.from(k), Buffer.from(v)] as const);
  const size = encoded.reduce((n, [k, v]) => n + 8 + k.length + 1 + v.length + 1, 4);
  const out = Buffer.alloc(size);
  out.writeUInt32LE(encoded.length, 0);
  let cursor = 4 + encoded.length * 8;
  encoded.forEach(([k, v], i) => {
    out.writeUInt32LE(k.length, 4 + i * 8);
    out.writeUInt32LE(v.length, 8 + i * 8);
    cursor += k.copy(out, cursor) + 1;
    cursor += v.copy(out, cursor) + 1;
  });
  return new Uint8Array(out.buffer, out.byteOffset, out.length);
}

/**
 * Decodes a serialized map. Like Envoy's host (PairsUtil::toPairs), anything
 * malformed (short, a missing NUL, trailing bytes) decodes to no pairs at all.
 */
export function decodePairs(bytes: Uint8Array): Pair[] {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length < 4) return [];
  const count = b.readUInt32LE(0);
  let cursor = 4 + count * 8;
  if (cursor > b.length) return [];
  const pairs: Pair[] = [];
  for (let i = 0; i < count; i++) {
    const kLen = b.readUInt32LE(4 + i * 8);
    const vLen = b.readUInt32LE(8 + i * 8);
    if (cursor + kLen + 1 + vLen + 1 > b.length || b[cursor + kLen] !== 0 || b[cursor + kLen + 1 + vLen] !== 0) return [];
    const key = b.toString("utf8", cursor, cursor + kLen);
    cursor += kLen + 1;
    pairs.push([key, b.toString("utf8", cursor, cursor + vLen)]);
    cursor += vLen + 1;
  }
  return cursor === b.length ? pairs : [];
}
