// The fuzzer's reference. How the model server reads a body: strict UTF-8
// with one leading BOM stripped, then JSON.parse, which keeps the last of
// duplicate keys as Python's json.loads does. And what the gateway must then
// answer, by its documented rules, written here independently of the
// AssemblyScript code.
import type { Kind } from "./cases.js";

export type PodReading =
  | { ok: true; value: unknown; text: string }
  | { ok: false; reason: "utf8"; offset: number }
  | { ok: false; reason: "json" };

export interface OpenAIError {
  message: string;
  type: string;
  param: string | null;
  code: string | null;
}

/** What the native build answers for a body. */
export type Decision =
  | { endpoint: string; model: string; stream: boolean; prompt: [number, number] }
  | { status: number; error: OpenAIError };

export interface Verdict {
  /** The outcome class, for the summary. */
  outcome: string;
  /** Set when the gateway's answer is wrong. */
  problem?: string;
  decision?: Decision;
}

/** Raised when the reference contradicts itself (its own bug, not the gateway's). */
export class OracleError extends Error {}

// ignoreBOM: the one BOM the server strips is removed by hand, so a second
// one stays in the text, where JSON.parse (like json.loads) refuses it.
const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

export function hasBom(body: Uint8Array): boolean {
  return body.length >= 3 && body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf;
}

export function podReading(body: Uint8Array): PodReading {
  const start = hasBom(body) ? 3 : 0;
  const offset = firstInvalidUtf8(body, start);
  let text: string;
  try {
    text = strictUtf8.decode(body.subarray(start));
  } catch {
    if (offset < 0) throw new OracleError("TextDecoder refuses bytes the reference validator accepts");
    return { ok: false, reason: "utf8", offset };
  }
  if (offset >= 0) throw new OracleError(`TextDecoder accepts bytes the reference validator refuses at ${offset}`);
  try {
    return { ok: true, value: JSON.parse(text), text };
  } catch {
    return { ok: false, reason: "json" };
  }
}

/**
 * Offset of the first ill-formed UTF-8 sequence's first byte, or -1: decodes
 * each sequence to its code point and checks the range, a different method
 * from the gateway's byte-range tables.
 */
export function firstInvalidUtf8(b: Uint8Array, start: number): number {
  for (let i = start; i < b.length; ) {
    const c = b[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    const n = c >= 0xf8 ? 0 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
    if (n === 0 || i + n > b.length) return i;
    let cp = c & (0x7f >> n);
    for (let k = 1; k < n; k++) {
      if ((b[i + k] & 0xc0) !== 0x80) return i;
      cp = cp * 64 + (b[i + k] & 0x3f);
    }
    const min = n === 2 ? 0x80 : n === 3 ? 0x800 : 0x10000;
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += n;
  }
  return -1;
}

export function hasLoneSurrogate(s: string): boolean {
  return /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);
}

const MAX_DEPTH = 64;
const MAX_INTEGER_DIGITS = 4300;
const NUMBER = /-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;

/** Nesting depth and integer lengths of valid JSON text, duplicates included (they vanish from the parsed value). */
function rawShape(text: string): { depth: number; longInteger: boolean } {
  let depth = 0;
  let max = 0;
  let longInteger = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      for (i++; text[i] !== '"'; i++) if (text[i] === "\\") i++;
    } else if (c === "[" || c === "{") {
      max = Math.max(max, ++depth);
    } else if (c === "]" || c === "}") {
      depth--;
    } else if (c === "-" || (c >= "0" && c <= "9")) {
      NUMBER.lastIndex = i;
      const m = NUMBER.exec(text)!;
      if (m[2] === undefined && m[3] === undefined && m[1].length > MAX_INTEGER_DIGITS) longInteger = true;
      i += m[0].length - 1;
    }
  }
  return { depth: max, longInteger };
}

const INVALID_JSON = "request body is not valid JSON: ";
const INVALID_UTF8 = "request body is not valid UTF-8: invalid byte sequence at byte ";

type Expected =
  | { routed: true; model: string; stream: boolean; promptField: string | null; value: Record<string, unknown> }
  | { routed: false; status: number; outcome: string; error: OpenAIError | ((e: OpenAIError) => boolean) };

function badRequest(param: string, message: string): Expected {
  return { routed: false, status: 400, outcome: `400 ${param}`, error: { message, type: "invalid_request_error", param, code: null } };
}

function invalid(outcome: string, matches: (message: string) => boolean): Expected {
  return {
    routed: false,
    status: 400,
    outcome,
    error: (e) => matches(e.message) && e.type === "invalid_request_error" && e.param === null && e.code === null,
  };
}

/** What the gateway must answer for a body the server reads as `reading`. */
function expected(reading: PodReading, kind: Kind, served: ReadonlyMap<string, ReadonlySet<string>>): Expected {
  if (!reading.ok) {
    if (reading.reason === "utf8") return invalid("400 invalid UTF-8", (m) => m === INVALID_UTF8 + reading.offset);
    // The scan may meet a nesting or integer limit before the syntax error.
    return invalid("400 invalid JSON", (m) => m.startsWith(INVALID_JSON));
  }
  const v = reading.value;
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    return invalid("400 invalid JSON", (m) => /^request body is not valid JSON: expected a JSON object at byte \d+$/.test(m));
  }
  const shape = rawShape(reading.text);
  if (shape.depth > MAX_DEPTH || shape.longInteger) {
    return invalid("400 nesting/integer limit", (m) =>
      (shape.depth > MAX_DEPTH && /^request body is not valid JSON: JSON nested too deeply at byte \d+$/.test(m)) ||
      (shape.longInteger && /^request body is not valid JSON: integer with more than 4300 digits at byte \d+$/.test(m)));
  }
  const body = v as Record<string, unknown>;
  const has = (k: string) => Object.hasOwn(body, k);
  if (!has("model")) return badRequest("model", "you must provide a model parameter");
  const model = body.model;
  if (typeof model !== "string") return badRequest("model", "'model' must be a string");
  if (model === "") return badRequest("model", "'model' must not be empty");
  if (has("stream") && body.stream !== true && body.stream !== false && body.stream !== null) {
    return badRequest("stream", "'stream' must be a boolean");
  }
  const isPrompt = (p: unknown) => typeof p === "string" || Array.isArray(p);
  let promptField: string | null = null;
  if (kind === "chat") {
    if (!has("messages")) return badRequest("messages", "'messages' is a required property");
    if (!Array.isArray(body.messages)) return badRequest("messages", "'messages' must be an array");
    promptField = "messages";
  } else if (kind === "completions") {
    if (!has("prompt")) return badRequest("prompt", "'prompt' is a required property");
    if (!isPrompt(body.prompt)) return badRequest("prompt", "'prompt' must be a string or an array");
    promptField = "prompt";
  } else if (Array.isArray(body.messages)) {
    promptField = "messages";
  } else if (isPrompt(body.prompt)) {
    promptField = "prompt";
  }
  if (!served.has(model)) {
    return {
      routed: false,
      status: 404,
      outcome: "404 unknown model",
      error: {
        message: `The model '${echoedName(model)}' does not exist or is not served by this gateway`,
        type: "invalid_request_error",
        param: "model",
        code: "model_not_found",
      },
    };
  }
  return { routed: true, model, stream: body.stream === true, promptField, value: body };
}

/**
 * Checks the native build's answer `text` for `body`: well-formed text in one
 * of the two shapes, and exactly what `expected()` says. `served` maps each
 * model name to the endpoints of its pool.
 */
export function judge(text: string, body: Uint8Array, kind: Kind, served: ReadonlyMap<string, ReadonlySet<string>>): Verdict {
  if (hasLoneSurrogate(text)) return { outcome: "bad answer", problem: "answer has a lone surrogate (not encodable as UTF-8)" };
  let decision: Decision;
  try {
    decision = JSON.parse(text) as Decision;
  } catch {
    return { outcome: "bad answer", problem: `answer is not JSON: ${text.slice(0, 200)}` };
  }
  const reading = podReading(body);
  const want = expected(reading, kind, served);
  const fail = (problem: string): Verdict => ({ outcome: want.routed ? "routed" : want.outcome, problem, decision });

  if (!want.routed) {
    if (!("status" in decision)) {
      const why = reading.ok ? `the server reads model ${JSON.stringify((reading.value as { model?: unknown }).model)}` : `the server's reading fails (${reading.reason})`;
      return fail(`gateway routed (model ${JSON.stringify(decision.model)}) but expected ${want.status}: ${why}`);
    }
    const e = decision.error;
    const shapeOk = e !== null && typeof e === "object" && typeof e.message === "string" && typeof e.type === "string";
    const matches = typeof want.error === "function" ? shapeOk && want.error(e) : shapeOk && sameError(e, want.error);
    if (decision.status !== want.status || !matches) {
      return fail(`expected ${want.status} ${typeof want.error === "function" ? want.outcome : JSON.stringify(want.error)}, got ${decision.status} ${JSON.stringify(e)}`);
    }
    return { outcome: want.outcome, decision };
  }

  if (!("endpoint" in decision)) return fail(`expected routing model ${JSON.stringify(want.model)}, got ${decision.status} ${JSON.stringify(decision.error)}`);
  if (decision.model !== want.model) return fail(`gateway read model ${JSON.stringify(decision.model)}, the server reads ${JSON.stringify(want.model)}`);
  if (decision.stream !== want.stream) return fail(`gateway read stream=${decision.stream}, the server reads ${want.stream}`);
  if (!served.get(want.model)!.has(decision.endpoint)) return fail(`endpoint ${decision.endpoint} is not in the pool of ${JSON.stringify(want.model)}`);
  const [start, end] = decision.prompt;
  if (want.promptField === null) {
    if (start !== -1 || end !== -1) return fail(`prompt span [${start}, ${end}] for a body without a prompt`);
  } else {
    const span = strictUtf8.decode(body.subarray(start, end));
    let same = false;
    try {
      same = JSON.stringify(JSON.parse(span)) === JSON.stringify(want.value[want.promptField]);
    } catch {
      same = false;
    }
    if (!same) return fail(`prompt span [${start}, ${end}] does not hold the last "${want.promptField}"`);
  }
  return { outcome: "routed", decision };
}

export function sameError(a: OpenAIError, b: OpenAIError): boolean {
  return a.message === b.message && a.type === b.type && a.param === b.param && a.code === b.code;
}

/** The gateway repeats at most 256 UTF-16 units of a name, then "...", never half a surrogate pair. */
function echoedName(name: string): string {
  if (name.length <= 256) return name;
  const last = name.charCodeAt(255);
  return `${name.slice(0, last >= 0xd800 && last <= 0xdbff ? 255 : 256)}...`;
}
