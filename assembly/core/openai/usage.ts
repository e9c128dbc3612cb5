// Token counts from a model server's answer: the `usage` object
// ({"prompt_tokens":N,"completion_tokens":M,...}, or a Responses answer's
// {"input_tokens":N,"output_tokens":M,...}) that OpenAI-compatible servers
// put at the end of a JSON answer, and in the last event of a stream whose
// request asked for stream_options.include_usage (a Responses stream's
// response.completed always has it). How a stream ended is judged from the
// same tail.
//
// The filter never buffers an answer: as it streams through, UsageTail keeps
// only its last TAIL_BYTES, and findUsage reads the counts from that tail
// once the stream is over. The tail can be read without the start of the
// document because of how JSON strings work: inside a string every quote is
// escaped, and a string's closing quote is never followed by a letter, so the
// bytes `,"usage"` or `{"usage"` (whitespace allowed around the quotes) mark
// a member key wherever they occur, even in a model's answer that quotes
// JSON. From that key on, the usage object is parsed exactly.
//
// Pure and bounded: no host calls, no allocation while scanning, at most
// MAX_CANDIDATES keys tried, and a truncated, hostile or non-JSON body yields
// "no usage", never a trap.

/** Bytes of an answer's end kept per stream: the usage object and what servers put after it. */
export const TAIL_BYTES: i32 = 2048;
/** Keys named "usage" tried from the end before giving up (an earlier one may be complete when the last is cut off). */
const MAX_CANDIDATES = 8;
/** Longer integers are not token counts: such a member makes the usage unreadable. */
const MAX_DIGITS = 15;

const QUOTE: u8 = 0x22;
const BACKSLASH: u8 = 0x5c;
const COMMA: u8 = 0x2c;
const COLON: u8 = 0x3a;
const OPEN_BRACE: u8 = 0x7b;
const CLOSE_BRACE: u8 = 0x7d;
const OPEN_BRACKET: u8 = 0x5b;
const CLOSE_BRACKET: u8 = 0x5d;

/** How a stream ended, as its tail shows: whole, cut short, or with an error event (a generation that failed). */
export const enum StreamEnd { Whole = 0, Broken = 1, Failed = 2 }

/** The counts read from a usage object. */
export class Usage {
  promptTokens: u64 = 0;
  completionTokens: u64 = 0;
}

/** The last TAIL_BYTES of a body that arrives in chunks, kept in a ring. */
export class UsageTail {
  private ring: StaticArray<u8> = new StaticArray<u8>(TAIL_BYTES);
  /** Where the next byte goes. */
  private next: i32 = 0;
  /** Bytes held, at most TAIL_BYTES. */
  private held: i32 = 0;

  /** Empties the tail for another answer, keeping its buffer. */
  clear(): void {
    this.next = 0;
    this.held = 0;
  }

  /** How many bytes at the end of a chunk of `size` are worth reading: the rest could never stay in the tail. */
  static wanted(size: i32): i32 {
    return size < TAIL_BYTES ? (size > 0 ? size : 0) : TAIL_BYTES;
  }

  get length(): i32 {
    return this.held;
  }

  /** Appends bytes; only the last TAIL_BYTES of everything appended are kept. */
  push(ptr: usize, len: i32): void {
    if (len <= 0) return;
    if (len > TAIL_BYTES) {
      ptr += <usize>(len - TAIL_BYTES);
      len = TAIL_BYTES;
    }
    const ring = changetype<usize>(this.ring);
    const first = min(len, TAIL_BYTES - this.next);
    memory.copy(ring + <usize>this.next, ptr, <usize>first);
    if (first < len) memory.copy(ring, ptr + <usize>first, <usize>(len - first));
    this.next = (this.next + len) % TAIL_BYTES;
    this.held = min(TAIL_BYTES, this.held + len);
  }

  /** Copies the tail, oldest byte first, to `out` (room for `length` bytes). */
  copyTo(out: usize): void {
    const ring = changetype<usize>(this.ring);
    const start = (this.next - this.held + TAIL_BYTES) % TAIL_BYTES;
    const first = min(this.held, TAIL_BYTES - start);
    memory.copy(out, ring + <usize>start, <usize>first);
    if (first < this.held) memory.copy(out + <usize>first, ring, <usize>(this.held - first));
  }

  /**
   * How the stream in the tail ended. A chat or completions stream is whole
   * when it ends with `data: [DONE]`. A Responses stream has no [DONE]: its
   * last event's type says (response.completed or response.incomplete: whole;
   * response.failed or error: failed). The type is read at the event's start
   * (llama.cpp and OpenAI write it first) or its end (vLLM's pydantic events
   * write it last); a last event too long for the tail with neither in sight
   * can only be the completed response, whose type is first: whole.
   */
  streamEnd(responses: bool): StreamEnd {
    if (!responses) return this.endsWithErrorEvent() ? StreamEnd.Failed : this.endsWithDone() ? StreamEnd.Whole : StreamEnd.Broken;
    let end = this.held;
    while (end > 0 && isLineSpace(this.byteAt(end - 1))) end--;
    const at = this.lastDataField(end);
    let j = at < 0 ? -1 : this.skipSpaces(at + DATA.length);
    if (at >= 0 && (j >= end || this.byteAt(j) != OPEN_BRACE)) return StreamEnd.Broken;
    let type = j < 0 ? -1 : this.typeAfter(this.skipLineSpace(j + 1));
    if (type < 0 && end > 0 && this.byteAt(end - 1) == CLOSE_BRACE) type = this.typeBefore(end - 1);
    if (type < 0) return at < 0 ? StreamEnd.Whole : StreamEnd.Broken;
    if (this.startsAt(type, '"response.completed"') || this.startsAt(type, '"response.incomplete"')) return StreamEnd.Whole;
    if (this.startsAt(type, '"response.failed"') || this.startsAt(type, '"error"')) return StreamEnd.Failed;
    return StreamEnd.Broken;
  }

  /** Where the string value of a `"type":` member starting at `j` begins (its quote); -1 if none is there. */
  private typeAfter(j: i32): i32 {
    if (!this.startsAt(j, TYPE_KEY)) return -1;
    j = this.skipLineSpace(j + TYPE_KEY.length);
    if (j >= this.held || this.byteAt(j) != COLON) return -1;
    j = this.skipLineSpace(j + 1);
    return j < this.held && this.byteAt(j) == QUOTE ? j : -1;
  }

  /** Where the string value of a `"type":` member ending just before `close` (an object's last) begins; -1 if none. */
  private typeBefore(close: i32): i32 {
    let j = close - 1;
    while (j >= 0 && isLineSpace(this.byteAt(j))) j--;
    if (j < 1 || this.byteAt(j) != QUOTE) return -1;
    // Event types hold no escapes: the previous quote opens the value.
    let open = j - 1;
    while (open >= 0 && this.byteAt(open) != QUOTE) open--;
    let k = open - 1;
    while (k >= 0 && isLineSpace(this.byteAt(k))) k--;
    if (k < 0 || this.byteAt(k) != COLON) return -1;
    k--;
    while (k >= 0 && isLineSpace(this.byteAt(k))) k--;
    const keyStart = k - TYPE_KEY.length + 1;
    if (keyStart < 1 || !this.startsAt(keyStart, TYPE_KEY)) return -1;
    const before = this.byteAt(keyStart - 1);
    return before == COMMA || before == OPEN_BRACE || isLineSpace(before) ? open : -1;
  }

  private skipSpaces(j: i32): i32 {
    while (j < this.held && this.byteAt(j) == 0x20) j++;
    return j;
  }

  private skipLineSpace(j: i32): i32 {
    while (j < this.held && isLineSpace(this.byteAt(j))) j++;
    return j;
  }

  /** Whether the bytes so far end with `data: [DONE]` (blank lines after it allowed). */
  private endsWithDone(): bool {
    let end = this.held;
    while (end > 0 && isLineSpace(this.byteAt(end - 1))) end--;
    const start = end - DONE.length;
    if (start < 0) return false;
    for (let i = 0; i < DONE.length; i++) {
      if (<i32>this.byteAt(start + i) != DONE.charCodeAt(i)) return false;
    }
    return true;
  }

  /**
   * Whether the stream's last data event before `[DONE]` is an error,
   * `data: {"error": ...}`: vLLM, SGLang and llama.cpp end a 200 stream
   * that failed mid-way so (vllm/entrypoints/openai/serving_chat.py,
   * sglang srt/entrypoints/openai/serving_chat.py, llama.cpp
   * tools/server/server-http.cpp). Only the tail is seen: an error event
   * longer than it reads as no error.
   */
  private endsWithErrorEvent(): bool {
    // The start of the last event that is not the terminal one.
    let end = this.held;
    while (end > 0 && isLineSpace(this.byteAt(end - 1))) end--;
    if (end >= DONE.length && this.endsWithDone()) end -= DONE.length;
    const at = this.lastDataField(end);
    if (at < 0) return false;
    let j = at + DATA.length;
    while (j < this.held && this.byteAt(j) == 0x20) j++;
    if (j >= this.held || this.byteAt(j) != OPEN_BRACE) return false;
    j++;
    while (j < this.held && isLineSpace(this.byteAt(j))) j++;
    for (let i = 0; i < ERROR_KEY.length; i++) {
      if (j + i >= this.held || <i32>this.byteAt(j + i) != ERROR_KEY.charCodeAt(i)) return false;
    }
    return true;
  }

  /** Where the last `data:` field starting a line before `end` begins; -1 if none. */
  private lastDataField(end: i32): i32 {
    for (let i = end - DATA.length; i >= 0; i--) {
      if (i > 0 && this.byteAt(i - 1) != 0x0a) continue;
      let k = 0;
      while (k < DATA.length && <i32>this.byteAt(i + k) == DATA.charCodeAt(k)) k++;
      if (k == DATA.length) {
        // The terminal event's own field is not the last event.
        if (this.startsAt(i + DATA.length, DONE)) continue;
        return i;
      }
    }
    return -1;
  }

  private startsAt(j: i32, text: string): bool {
    while (j < this.held && this.byteAt(j) == 0x20) j++;
    for (let i = 0; i < text.length; i++) {
      if (j + i >= this.held || <i32>this.byteAt(j + i) != text.charCodeAt(i)) return false;
    }
    return true;
  }

  /** The tail's byte `j`, oldest first. */
  private byteAt(j: i32): u8 {
    return unchecked(this.ring[(this.next - this.held + j + TAIL_BYTES) % TAIL_BYTES]);
  }

  /** The usage in the tail (the last complete one), into `out`; false when there is none. */
  find(out: Usage): bool {
    const flat = changetype<usize>(LINEAR);
    this.copyTo(flat);
    return findUsage(flat, this.held, out);
  }
}

/** A stream's terminal event. */
const DONE = "[DONE]";
const DATA = "data:";
const ERROR_KEY = '"error"';
const TYPE_KEY = '"type"';

function isLineSpace(c: u8): bool {
  return c == 0x0a || c == 0x0d || c == 0x20;
}

// One buffer for every stream's final scan: a worker runs one callback at a time.
const LINEAR = new StaticArray<u8>(TAIL_BYTES);

/**
 * The last complete usage object in `len` bytes at `ptr` (a JSON document,
 * SSE events, or the tail of either), into `out`. It must hold
 * `prompt_tokens` (or `input_tokens`); `completion_tokens` (`output_tokens`)
 * is 0 when absent (embeddings).
 */
export function findUsage(ptr: usize, len: i32, out: Usage): bool {
  let tried = 0;
  for (let at = len - 7; at >= 0 && tried < MAX_CANDIDATES; at--) {
    if (!isUsageKey(ptr, len, at)) continue;
    tried++;
    const open = objectAfterKey(ptr, len, at + 7);
    if (open >= 0 && readUsageObject(ptr, len, open, out)) return true;
  }
  return false;
}

/** `"usage"` at `at`, opened after `{` or `,` (whitespace between allowed): a member key, never string content. */
function isUsageKey(ptr: usize, len: i32, at: i32): bool {
  if (load<u8>(ptr + <usize>at) != QUOTE || load<u8>(ptr + <usize>(at + 6)) != QUOTE) return false;
  if (!bytesAre(ptr + <usize>(at + 1), "usage")) return false;
  let before = at - 1;
  while (before >= 0 && isWs(load<u8>(ptr + <usize>before))) before--;
  if (before < 0) return false;
  const c = load<u8>(ptr + <usize>before);
  return c == COMMA || c == OPEN_BRACE;
}

/** Position of the `{` of the key's value, or -1 if the value is not an object (e.g. null in a stream's chunks). */
function objectAfterKey(ptr: usize, len: i32, pos: i32): i32 {
  pos = skipWs(ptr, len, pos);
  if (pos >= len || load<u8>(ptr + <usize>pos) != COLON) return -1;
  pos = skipWs(ptr, len, pos + 1);
  return pos < len && load<u8>(ptr + <usize>pos) == OPEN_BRACE ? pos : -1;
}

/** Reads the object at `open`; false unless it is complete and holds an integer prompt_tokens. */
function readUsageObject(ptr: usize, len: i32, open: i32, out: Usage): bool {
  let prompt: i64 = -1;
  let completion: i64 = 0;
  let pos = skipWs(ptr, len, open + 1);
  if (pos < len && load<u8>(ptr + <usize>pos) == CLOSE_BRACE) return false;
  while (pos < len) {
    if (load<u8>(ptr + <usize>pos) != QUOTE) return false;
    const keyStart = pos + 1;
    const keyEnd = stringEnd(ptr, len, pos);
    if (keyEnd < 0) return false;
    pos = skipWs(ptr, len, keyEnd + 1);
    if (pos >= len || load<u8>(ptr + <usize>pos) != COLON) return false;
    pos = skipWs(ptr, len, pos + 1);
    if (pos >= len) return false;
    const which = keyIs(ptr, keyStart, keyEnd, "prompt_tokens") || keyIs(ptr, keyStart, keyEnd, "input_tokens") ? 1
      : keyIs(ptr, keyStart, keyEnd, "completion_tokens") || keyIs(ptr, keyStart, keyEnd, "output_tokens") ? 2 : 0;
    let valueEnd: i32;
    if (which != 0) {
      const n = integerAt(ptr, len, pos);
      if (n < 0) return false;
      if (which == 1) prompt = n;
      else completion = n;
      valueEnd = pos + digitCount(ptr, len, pos);
    } else {
      valueEnd = skipValue(ptr, len, pos);
      if (valueEnd < 0) return false;
    }
    pos = skipWs(ptr, len, valueEnd);
    if (pos >= len) return false;
    const c = load<u8>(ptr + <usize>pos);
    if (c == CLOSE_BRACE) {
      if (prompt < 0) return false;
      out.promptTokens = <u64>prompt;
      out.completionTokens = <u64>completion;
      return true;
    }
    if (c != COMMA) return false;
    pos = skipWs(ptr, len, pos + 1);
  }
  return false;
}

/** A non-negative integer literal at `pos` (no fraction or exponent, at most MAX_DIGITS), or -1. */
function integerAt(ptr: usize, len: i32, pos: i32): i64 {
  const digits = digitCount(ptr, len, pos);
  if (digits == 0 || digits > MAX_DIGITS) return -1;
  const end = pos + digits;
  if (end < len) {
    const c = load<u8>(ptr + <usize>end);
    if (c == 0x2e || c == 0x65 || c == 0x45) return -1;
  }
  let n: i64 = 0;
  for (let i = pos; i < end; i++) n = n * 10 + <i64>(load<u8>(ptr + <usize>i) - 0x30);
  return n;
}

function digitCount(ptr: usize, len: i32, pos: i32): i32 {
  let i = pos;
  while (i < len && isDigit(load<u8>(ptr + <usize>i))) i++;
  return i - pos;
}

/** End (exclusive) of the value at `pos`: a string, a container, or a bare word/number; -1 if it runs past the end. */
function skipValue(ptr: usize, len: i32, pos: i32): i32 {
  const c = load<u8>(ptr + <usize>pos);
  if (c == QUOTE) {
    const end = stringEnd(ptr, len, pos);
    return end < 0 ? -1 : end + 1;
  }
  if (c == OPEN_BRACE || c == OPEN_BRACKET) return containerEnd(ptr, len, pos);
  let i = pos;
  while (i < len) {
    const b = load<u8>(ptr + <usize>i);
    if (b == COMMA || b == CLOSE_BRACE || b == CLOSE_BRACKET || isWs(b)) break;
    if (b == QUOTE || b == OPEN_BRACE || b == OPEN_BRACKET || b == COLON) return -1;
    i++;
  }
  return i == pos || i >= len ? -1 : i;
}

/** End (exclusive) of the object or array opening at `pos`, strings skipped; -1 if it is not closed in the buffer. */
function containerEnd(ptr: usize, len: i32, pos: i32): i32 {
  let depth = 0;
  let i = pos;
  while (i < len) {
    const c = load<u8>(ptr + <usize>i);
    if (c == QUOTE) {
      const end = stringEnd(ptr, len, i);
      if (end < 0) return -1;
      i = end + 1;
      continue;
    }
    if (c == OPEN_BRACE || c == OPEN_BRACKET) depth++;
    else if (c == CLOSE_BRACE || c == CLOSE_BRACKET) {
      depth--;
      if (depth == 0) return i + 1;
    }
    i++;
  }
  return -1;
}

/** Position of the closing quote of the string opening at `pos`, or -1. */
function stringEnd(ptr: usize, len: i32, pos: i32): i32 {
  let i = pos + 1;
  while (i < len) {
    const c = load<u8>(ptr + <usize>i);
    if (c == QUOTE) return i;
    i += c == BACKSLASH ? 2 : 1;
  }
  return -1;
}

/** The raw key bytes equal `name` (keys spelled with escapes are not recognised). */
function keyIs(ptr: usize, start: i32, end: i32, name: string): bool {
  return end - start == name.length && bytesAre(ptr + <usize>start, name);
}

function bytesAre(ptr: usize, ascii: string): bool {
  for (let i = 0; i < ascii.length; i++) {
    if (<i32>load<u8>(ptr + <usize>i) != ascii.charCodeAt(i)) return false;
  }
  return true;
}

function skipWs(ptr: usize, len: i32, pos: i32): i32 {
  while (pos < len && isWs(load<u8>(ptr + <usize>pos))) pos++;
  return pos;
}

@inline function isWs(c: u8): bool {
  return c == 0x20 || c == 0x0a || c == 0x0d || c == 0x09;
}

@inline function isDigit(c: u8): bool {
  return c >= 0x30 && c <= 0x39;
}
