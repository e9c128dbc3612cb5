// Strict UTF-8 validation (RFC 3629, Unicode table 3-7), the same bytes the
// model server's decoder accepts: no overlong forms, no encoded surrogates,
// nothing above U+10FFFF, no truncated sequences or stray continuation bytes.

/**
 * End of the well-formed sequence whose lead byte (>= 0x80) is at `pos`, or
 * -1 if it is ill-formed. Only reads bytes before `len`. It runs once per
 * non-ASCII character of every body, so continuation bytes are checked two
 * or three at a time and the rare lead bytes with a narrower second-byte
 * range are tested last.
 */
// @ts-ignore: decorator
@inline export function utf8SequenceEnd(base: usize, pos: i32, len: i32): i32 {
  const p = base + <usize>pos;
  const c = <u32>load<u8>(p);
  if ((c & 0xf0) == 0xe0) {
    if (pos + 3 > len) return -1;
    const tail = <u32>load<u16>(p, 1);
    if ((tail & 0xc0c0) != 0x8080) return -1;
    const c1 = tail & 0xff;
    // E0 80..9F would be overlong; ED A0..BF are UTF-16 surrogates.
    if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f)) return -1;
    return pos + 3;
  }
  if ((c & 0xe0) == 0xc0) {
    // C0 and C1 could only start overlong forms.
    if (c < 0xc2 || pos + 2 > len) return -1;
    return (<u32>load<u8>(p, 1) & 0xc0) == 0x80 ? pos + 2 : -1;
  }
  // 80..BF are stray continuation bytes; F5..FF would go beyond U+10FFFF.
  if (c < 0xf0 || c > 0xf4 || pos + 4 > len) return -1;
  const tail = load<u32>(p) >> 8;
  if ((tail & 0xc0c0c0) != 0x808080) return -1;
  const c1 = tail & 0xff;
  // F0 80..8F would be overlong; F4 90..BF beyond U+10FFFF.
  if ((c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 > 0x8f)) return -1;
  return pos + 4;
}

/** Offset of the first ill-formed sequence in [start, len), or -1 if there is none. */
export function firstInvalidUtf8(base: usize, start: i32, len: i32): i32 {
  let pos = start;
  while (pos < len) {
    if (load<u8>(base + <usize>pos) < 0x80) {
      pos++;
      continue;
    }
    const end = utf8SequenceEnd(base, pos, len);
    if (end < 0) return pos;
    pos = end;
  }
  return -1;
}
