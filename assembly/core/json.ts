// A validating JSON scanner over raw bytes that reports errors instead of
// aborting (AssemblyScript has no exceptions, and a trap would take down the
// VM on hostile input). It checks the whole document and hands each top-level
// object member to `member()` as byte spans, so callers decode only what they
// need and never build a tree.

export const enum JsonType { Object = 1, Array = 2, String = 3, Number = 4, True = 5, False = 6, Null = 7 }

// Deep enough for any real request; bounded so recursion cannot exhaust the stack.
const MAX_DEPTH = 64;

const QUOTE: u8 = 0x22;
const BACKSLASH: u8 = 0x5c;

export class JsonScanner {
  protected base: usize = 0;
  protected len: i32 = 0;
  /** Empty when the last scan succeeded. */
  error: string = "";

  /** Scans a document that must be one JSON object; false on any error. */
  scanObject(ptr: usize, len: i32): bool {
    this.base = ptr;
    this.len = len;
    this.error = "";
    let pos = this.skipWs(0);
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

  /** True if the raw key span (without quotes) equals `name` (ASCII). */
  protected keyIs(keyStart: i32, keyEnd: i32, name: string): bool {
    if (keyEnd - keyStart != name.length) return false;
    for (let i = 0; i < name.length; i++) {
      if (<i32>this.at(keyStart + i) != name.charCodeAt(i)) return false;
    }
    return true;
  }

  /** Decodes a string value span (including its quotes). */
  stringAt(start: i32, end: i32): string {
    const inner = start + 1;
    const innerEnd = end - 1;
    let plain = true;
    for (let i = inner; i < innerEnd; i++) {
      if (this.at(i) == BACKSLASH) { plain = false; break; }
    }
    if (plain) return String.UTF8.decodeUnsafe(this.base + <usize>inner, <usize>(innerEnd - inner));
    return this.unescape(inner, innerEnd);
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
      if (topLevel) {
        this.member(keyStart + 1, keyEnd - 1, this.typeAt(valueStart), valueStart, pos);
        if (this.error.length != 0) return -1;
      }
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

  /** Most of a body is string content: this loop reads bytes from locals, not fields. */
  private skipString(pos: i32): i32 {
    const base = this.base;
    const len = this.len;
    pos++;
    while (pos < len) {
      const c = load<u8>(base + <usize>pos);
      if (c == QUOTE) return pos + 1;
      if (c == BACKSLASH) {
        if (pos + 1 >= len) break;
        const e = load<u8>(base + <usize>(pos + 1));
        if (e == 0x75) {
          if (pos + 6 > len) break;
          for (let i = 2; i < 6; i++) {
            if (hexValue(load<u8>(base + <usize>(pos + i))) < 0) return this.failPos("bad \\u escape", pos);
          }
          pos += 6;
          continue;
        }
        if (e != QUOTE && e != BACKSLASH && e != 0x2f && e != 0x62 && e != 0x66 && e != 0x6e && e != 0x72 && e != 0x74) {
          return this.failPos("bad escape", pos);
        }
        pos += 2;
        continue;
      }
      if (c < 0x20) return this.failPos("control character in string", pos);
      pos++;
    }
    return this.failPos("unterminated string", pos);
  }

  private skipNumber(pos: i32): i32 {
    const start = pos;
    if (this.at(pos) == 0x2d) pos++;
    if (pos >= this.len) return this.failPos("bad number", start);
    if (this.at(pos) == 0x30) {
      pos++;
    } else {
      const d = pos;
      pos = this.digits(pos);
      if (pos == d) return this.failPos("bad number", start);
    }
    if (pos < this.len && this.at(pos) == 0x2e) {
      const d = pos + 1;
      pos = this.digits(d);
      if (pos == d) return this.failPos("bad number", start);
    }
    if (pos < this.len && (this.at(pos) | 0x20) == 0x65) {
      pos++;
      if (pos < this.len && (this.at(pos) == 0x2b || this.at(pos) == 0x2d)) pos++;
      const d = pos;
      pos = this.digits(d);
      if (pos == d) return this.failPos("bad number", start);
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

  private unescape(start: i32, end: i32): string {
    let out = "";
    let run = start;
    let pos = start;
    while (pos < end) {
      if (this.at(pos) != BACKSLASH) { pos++; continue; }
      out += String.UTF8.decodeUnsafe(this.base + <usize>run, <usize>(pos - run));
      const e = this.at(pos + 1);
      if (e == 0x75) {
        let code = 0;
        for (let i = 2; i < 6; i++) code = (code << 4) | hexValue(this.at(pos + i));
        out += String.fromCharCode(code);
        pos += 6;
      } else {
        out += String.fromCharCode(<i32>escaped(e));
        pos += 2;
      }
      run = pos;
    }
    return out + String.UTF8.decodeUnsafe(this.base + <usize>run, <usize>(end - run));
  }
}

function hexValue(c: u8): i32 {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const l = c | 0x20;
  if (l >= 0x61 && l <= 0x66) return l - 0x61 + 10;
  return -1;
}

function escaped(e: u8): u8 {
  if (e == 0x62) return 0x08;
  if (e == 0x66) return 0x0c;
  if (e == 0x6e) return 0x0a;
  if (e == 0x72) return 0x0d;
  if (e == 0x74) return 0x09;
  return e; // " \ /
}
