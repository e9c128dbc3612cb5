// A validating JSON scanner over raw bytes that reports errors instead of
// aborting (AssemblyScript has no exceptions, and a trap would take down the
// VM on hostile input). It checks the whole document and hands each top-level
// object member to `member()` as byte spans, so callers decode only what they
// need and never build a tree.
//
// It accepts exactly the bytes the model server accepts (Python's json.loads
// on the raw body): strict UTF-8 with one optional leading BOM, and reports
// invalid UTF-8 ahead of any syntax error, as Python decodes before it parses.
import { firstInvalidUtf8, utf8SequenceEnd } from "../wire/utf8";

export const enum JsonType { Object = 1, Array = 2, String = 3, Number = 4, True = 5, False = 6, Null = 7 }

// Deep enough for any real request; bounded so recursion cannot exhaust the stack.
const MAX_DEPTH = 64;
// CPython refuses to convert longer integer literals (sys.int_info
// default_max_str_digits), so the server would fail such a body anyway.
const MAX_INTEGER_DIGITS = 4300;

const QUOTE: u8 = 0x22;
const BACKSLASH: u8 = 0x5c;


export class JsonScanner {
  protected base: usize = 0;
  protected len: i32 = 0;
  /** Empty when the last scan succeeded. */
  error: string = "";
  /** The last failed scan failed because the body is not valid UTF-8. */
  badUtf8: bool = false;

  /** Scans a document that must be one JSON object; false on any error. */
  scanObject(ptr: usize, len: i32): bool {
    this.base = ptr;
    this.len = len;
    this.error = "";
    this.badUtf8 = false;
    const start = hasBom(ptr, len) ? 3 : 0;
    if (this.scanFrom(start)) return true;
    // Error path only: the server decodes the whole body before parsing it.
    const bad = firstInvalidUtf8(ptr, start, len);
    if (bad >= 0) {
      this.error = "invalid byte sequence at byte " + bad.toString();
      this.badUtf8 = true;
    }
    return false;
  }

  private scanFrom(start: i32): bool {
    const len = this.len;
    let pos = this.skipWs(start);
    if (pos >= len) return this.fail("body is empty", pos);
    if (this.at(pos) != 0x7b) return this.fail("expected a JSON object", pos);
    pos = this.object(pos, 1, true);
    if (pos < 0) return false;
    pos = this.skipWs(pos);
    if (pos != len) return this.fail("unexpected data after the JSON object", pos);
    return true;
  }

  /** Called for each member of the top-level object, spans as byte offsets. */
  protected member(keyStart: i32, keyEnd: i32, type: JsonType, valueStart: i32, valueEnd: i32): void {}

  /**
   * True if the key span (without quotes) equals the ASCII `name` once its
   * escapes are decoded ("m\u006fdel" is "model"). Compares while decoding,
   * so it allocates nothing.
   */
  protected keyIs(keyStart: i32, keyEnd: i32, name: string): bool {
    const n = name.length;
    // Every escape is longer than the character it stands for.
    if (keyEnd - keyStart < n) return false;
    const base = this.base;
    let pos = keyStart;
    for (let i = 0; i < n; i++) {
      if (pos >= keyEnd) return false;
      let c = <i32>load<u8>(base + <usize>pos);
      if (c == BACKSLASH) {
        const e = load<u8>(base + <usize>(pos + 1));
        if (e == 0x75) {
          c = hex4(base + <usize>(pos + 2));
          pos += 6;
        } else {
          c = escaped(e);
          pos += 2;
        }
      } else {
        pos++;
      }
      if (c != name.charCodeAt(i)) return false;
    }
    return pos == keyEnd;
  }

  /** Decodes a string value span (including its quotes); the span was already validated. */
  stringAt(start: i32, end: i32): string {
    const inner = start + 1;
    const innerEnd = end - 1;
    const base = this.base;
    for (let i = inner; i < innerEnd; i++) {
      if (load<u8>(base + <usize>i) == BACKSLASH) return this.unescape(inner, innerEnd);
    }
    return String.UTF8.decodeUnsafe(base + <usize>inner, <usize>(innerEnd - inner));
  }

  /** Parses a number span as f64 (the span was already validated). */
  numberAt(start: i32, end: i32): f64 {
    return parseFloat(String.UTF8.decodeUnsafe(this.base + <usize>start, <usize>(end - start)));
  }

  // Inlined: it runs once per byte, and a call costs a shadow-stack frame.
  @inline protected at(pos: i32): u8 {
    return load<u8>(this.base + <usize>pos);
  }

  protected fail(message: string, pos: i32): bool {
    if (this.error.length == 0) this.error = message + " at byte " + pos.toString();
    return false;
  }

  private failPos(message: string, pos: i32): i32 {
    this.fail(message, pos);
    return -1;
  }

  private skipWs(pos: i32): i32 {
    const base = this.base;
    const len = this.len;
    while (pos < len) {
      const c = load<u8>(base + <usize>pos);
      if (c != 0x20 && c != 0x0a && c != 0x0d && c != 0x09) break;
      pos++;
    }
    return pos;
  }

  /** Skips one value starting at `pos` (no leading whitespace); returns its end or -1. */
  private value(pos: i32, depth: i32): i32 {
    if (pos >= this.len) return this.failPos("unexpected end of body", pos);
    const c = this.at(pos);
    if (c == 0x7b) return this.object(pos, depth + 1, false);
    if (c == 0x5b) return this.array(pos, depth + 1);
    if (c == QUOTE) return this.skipString(pos);
    if (c == 0x74) return this.literal(pos, "true");
    if (c == 0x66) return this.literal(pos, "false");
    if (c == 0x6e) return this.literal(pos, "null");
    if (c == 0x2d || (c >= 0x30 && c <= 0x39)) return this.skipNumber(pos);
    return this.failPos("unexpected character", pos);
  }

  private typeAt(pos: i32): JsonType {
    const c = this.at(pos);
    if (c == 0x7b) return JsonType.Object;
    if (c == 0x5b) return JsonType.Array;
    if (c == QUOTE) return JsonType.String;
    if (c == 0x74) return JsonType.True;
    if (c == 0x66) return JsonType.False;
    if (c == 0x6e) return JsonType.Null;
    return JsonType.Number;
  }

  private object(pos: i32, depth: i32, topLevel: bool): i32 {
    if (depth > MAX_DEPTH) return this.failPos("JSON nested too deeply", pos);
    pos = this.skipWs(pos + 1);
    if (pos < this.len && this.at(pos) == 0x7d) return pos + 1;
    while (true) {
      if (pos >= this.len || this.at(pos) != QUOTE) return this.failPos("expected a member name", pos);
      const keyStart = pos;
      pos = this.skipString(pos);
      if (pos < 0) return -1;
      const keyEnd = pos;
      pos = this.skipWs(pos);
      if (pos >= this.len || this.at(pos) != 0x3a) return this.failPos("expected ':'", pos);
      pos = this.skipWs(pos + 1);
      const valueStart = pos;
      pos = this.value(pos, depth);
      if (pos < 0) return -1;
      if (topLevel) this.member(keyStart + 1, keyEnd - 1, this.typeAt(valueStart), valueStart, pos);
      pos = this.skipWs(pos);
      if (pos >= this.len) return this.failPos("unterminated object", pos);
      const c = this.at(pos);
      if (c == 0x7d) return pos + 1;
      if (c != 0x2c) return this.failPos("expected ',' or '}'", pos);
      pos = this.skipWs(pos + 1);
    }
  }

  private array(pos: i32, depth: i32): i32 {
    if (depth > MAX_DEPTH) return this.failPos("JSON nested too deeply", pos);
    pos = this.skipWs(pos + 1);
    if (pos < this.len && this.at(pos) == 0x5d) return pos + 1;
    while (true) {
      pos = this.value(pos, depth);
      if (pos < 0) return -1;
      pos = this.skipWs(pos);
      if (pos >= this.len) return this.failPos("unterminated array", pos);
      const c = this.at(pos);
      if (c == 0x5d) return pos + 1;
      if (c != 0x2c) return this.failPos("expected ',' or ']'", pos);
      pos = this.skipWs(pos + 1);
    }
  }

  /**
   * Most of a body is string content: this loop reads from locals, not
   * fields. After a plain ASCII byte it skips sixteen plain bytes per step
   * (one SIMD compare); non-ASCII characters and escapes are taken one at a
   * time.
   */
  private skipString(pos: i32): i32 {
    const base = this.base;
    const len = this.len;
    pos++;
    while (pos < len) {
      const c = load<u8>(base + <usize>pos);
      if (c >= 0x80) {
        const end = utf8SequenceEnd(base, pos, len);
        // scanObject() words this error itself.
        if (end < 0) return this.failPos("invalid UTF-8", pos);
        pos = end;
      } else if (c == QUOTE) {
        return pos + 1;
      } else if (c == BACKSLASH) {
        if (pos + 1 >= len) break;
        const e = load<u8>(base + <usize>(pos + 1));
        if (e == 0x75) {
          if (pos + 6 > len) break;
          for (let i = 2; i < 6; i++) {
            if (hexValue(load<u8>(base + <usize>(pos + i))) < 0) return this.failPos("bad \\u escape", pos);
          }
          pos += 6;
        } else if (e == QUOTE || e == BACKSLASH || e == 0x2f || e == 0x62 || e == 0x66 || e == 0x6e || e == 0x72 || e == 0x74) {
          pos += 2;
        } else {
          return this.failPos("bad escape", pos);
        }
      } else if (c < 0x20) {
        return this.failPos("control character in string", pos);
      } else {
        pos++;
        // A single space between words of non-ASCII text is not worth a block.
        if (pos < len && load<u8>(base + <usize>pos) >= 0x80) continue;
        while (pos + 16 <= len) {
          const special = specialBytes(v128.load(base + <usize>pos));
          if (special != 0) {
            pos += ctz(special);
            break;
          }
          pos += 16;
        }
      }
    }
    return this.failPos("unterminated string", pos);
  }

  private skipNumber(pos: i32): i32 {
    const start = pos;
    if (this.at(pos) == 0x2d) pos++;
    if (pos >= this.len) return this.failPos("bad number", start);
    const intStart = pos;
    if (this.at(pos) == 0x30) {
      pos++;
    } else {
      pos = this.digits(pos);
      if (pos == intStart) return this.failPos("bad number", start);
    }
    const intEnd = pos;
    let integer = true;
    if (pos < this.len && this.at(pos) == 0x2e) {
      const d = pos + 1;
      pos = this.digits(d);
      if (pos == d) return this.failPos("bad number", start);
      integer = false;
    }
    if (pos < this.len && (this.at(pos) | 0x20) == 0x65) {
      pos++;
      if (pos < this.len && (this.at(pos) == 0x2b || this.at(pos) == 0x2d)) pos++;
      const d = pos;
      pos = this.digits(d);
      if (pos == d) return this.failPos("bad number", start);
      integer = false;
    }
    if (integer && intEnd - intStart > MAX_INTEGER_DIGITS) {
      return this.failPos("integer with more than " + MAX_INTEGER_DIGITS.toString() + " digits", start);
    }
    return pos;
  }

  private digits(pos: i32): i32 {
    const base = this.base;
    const len = this.len;
    while (pos < len) {
      const c = load<u8>(base + <usize>pos);
      if (c < 0x30 || c > 0x39) break;
      pos++;
    }
    return pos;
  }

  private literal(pos: i32, word: string): i32 {
    if (pos + word.length > this.len) return this.failPos("unexpected end of body", pos);
    for (let i = 0; i < word.length; i++) {
      if (<i32>this.at(pos + i) != word.charCodeAt(i)) return this.failPos("unexpected character", pos);
    }
    return pos + word.length;
  }

  /**
   * Decodes a validated string span with escapes in one pass into a buffer
   * of the largest possible size (one UTF-16 unit per byte), so long runs of
   * escapes cost linear time.
   */
  private unescape(start: i32, end: i32): string {
    const base = this.base;
    const out = new StaticArray<u16>(end - start);
    const dst = changetype<usize>(out);
    let n: usize = 0;
    let pos = start;
    while (pos < end) {
      const c = <u32>load<u8>(base + <usize>pos);
      if (c == BACKSLASH) {
        const e = load<u8>(base + <usize>(pos + 1));
        if (e == 0x75) {
          store<u16>(dst + (n++ << 1), <u16>hex4(base + <usize>(pos + 2)));
          pos += 6;
        } else {
          store<u16>(dst + (n++ << 1), <u16>escaped(e));
          pos += 2;
        }
      } else if (c < 0x80) {
        store<u16>(dst + (n++ << 1), <u16>c);
        pos++;
      } else {
        // Well-formed (validated by the scan): 2, 3 or 4 bytes.
        const c1 = <u32>load<u8>(base + <usize>(pos + 1)) & 0x3f;
        if (c < 0xe0) {
          store<u16>(dst + (n++ << 1), <u16>(((c & 0x1f) << 6) | c1));
          pos += 2;
        } else {
          const c2 = <u32>load<u8>(base + <usize>(pos + 2)) & 0x3f;
          if (c < 0xf0) {
            store<u16>(dst + (n++ << 1), <u16>(((c & 0x0f) << 12) | (c1 << 6) | c2));
            pos += 3;
          } else {
            const c3 = <u32>load<u8>(base + <usize>(pos + 3)) & 0x3f;
            const cp = (((c & 0x07) << 18) | (c1 << 12) | (c2 << 6) | c3) - 0x10000;
            store<u16>(dst + (n++ << 1), <u16>(0xd800 | (cp >> 10)));
            store<u16>(dst + (n++ << 1), <u16>(0xdc00 | (cp & 0x3ff)));
            pos += 4;
          }
        }
      }
    }
    return String.UTF16.decodeUnsafe(dst, n << 1);
  }
}

/** One leading UTF-8 byte order mark, which the server's decoder strips. */
function hasBom(ptr: usize, len: i32): bool {
  return len >= 3 && load<u8>(ptr) == 0xef && load<u8>(ptr + 1) == 0xbb && load<u8>(ptr + 2) == 0xbf;
}

/**
 * A bit for each of the 16 bytes at `v` that a string loop must look at:
 * '"', '\\', a control character or a non-ASCII byte (the last two are the
 * bytes below 0x20 as signed).
 */
// @ts-ignore: decorator
@inline function specialBytes(v: v128): i32 {
  const quote = i8x16.eq(v, i8x16.splat(QUOTE));
  const backslash = i8x16.eq(v, i8x16.splat(BACKSLASH));
  const low = i8x16.lt_s(v, i8x16.splat(0x20));
  return i8x16.bitmask(v128.or(v128.or(quote, backslash), low));
}

function hexValue(c: u8): i32 {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const l = c | 0x20;
  if (l >= 0x61 && l <= 0x66) return l - 0x61 + 10;
  return -1;
}

/** The UTF-16 unit of four validated hex digits at `ptr`. */
function hex4(ptr: usize): i32 {
  let code = 0;
  for (let i: usize = 0; i < 4; i++) code = (code << 4) | hexValue(load<u8>(ptr + i));
  return code;
}

function escaped(e: u8): i32 {
  if (e == 0x62) return 0x08;
  if (e == 0x66) return 0x0c;
  if (e == 0x6e) return 0x0a;
  if (e == 0x72) return 0x0d;
  if (e == 0x74) return 0x09;
  return e; // " \ /
}
