// Fuzz inputs: realistic chat and completions bodies, byte-level mutations of
// them, and generators aimed at what the gateway must read exactly as the
// model server does: duplicate and escaped keys, escaped model names, invalid
// UTF-8, BOMs, NUL bytes, deep nesting and huge numbers. A case depends only
// on (seed, index).
import { servedModels, STAGE_POOLS, type Stage } from "./pools.js";
import { deriveSeed, Rng } from "../testing/fixtures/rng.js";

export type Kind = "chat" | "completions" | "other";

export interface FuzzCase {
  stage: Stage;
  seed: number;
  index: number;
  kind: Kind;
  /** Which generator made the body, for the summary and for reproduction. */
  generator: string;
  body: Uint8Array;
}

/** Envoy answers only the two paths; the native build also routes other /v1/ paths. */
const STAGE_KINDS: Record<Stage, readonly Kind[]> = { native: ["chat", "completions", "other"], envoy: ["chat", "completions"] };
const STAGE_SALT: Record<Stage, number> = { native: 0, envoy: 0x5bd1e995 };

const GENERATORS = {
  real: 5,
  mutated: 40,
  "duplicate-keys": 12,
  "escaped-names": 10,
  "invalid-utf8": 10,
  "huge-numbers": 7,
  deep: 6,
  nul: 5,
  bom: 5,
} as const;
type Generator = keyof typeof GENERATORS;

const UNKNOWN_MODELS = [
  "gpt-4o", "LLAMA-3.1-8B", "llama-3.1-8b ", " llama-3.1-8b", "llama-3.1-8b\u0000", "\ud800", "\udfff", "llama\ud83d",
  "m\u00f6del", "sql-lora/", "", "\ufeffllama-3.1-8b", "llama-3.1-8b\u00a0",
];

const WORDS = [
  "the", "model", "answers", "hello", "SELECT * FROM t;", "caf\u00e9", "na\u00efve", "\u65e5\u672c\u8a9e", "\u6a21\u578b", "\u{1f600}",
  "\u{1f680}", "\"quoted\"", "back\\slash", "line\nbreak", "tab\there", "ctl\u0001", "nul\u0000", "\u2028sep", "lone\ud800",
  "/slash/", "<|eot_id|>", "   ", "\ufeffbom", "\u00a0nbsp",
];

const KEY_NEAR_MISSES = ["Model", "MODEL", "model ", " model", "models", "mode", "model\u0000", "stream_options", "messages_", "prompt2", "m\u00f6del", "\ufeffmodel"];

/** Ill-formed UTF-8: overlong, surrogates, beyond U+10FFFF, stray and truncated. */
const INVALID_UTF8 = [
  [0xc0, 0x80], [0xc1, 0xbf], [0xe0, 0x80, 0x80], [0xe0, 0x9f, 0xbf], [0xf0, 0x80, 0x80, 0x80], [0xf0, 0x8f, 0xbf, 0xbf],
  [0xed, 0xa0, 0x80], [0xed, 0xbf, 0xbf], [0xed, 0xa0, 0xbd, 0xed, 0xb8, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xf5, 0x80, 0x80, 0x80],
  [0xf8, 0x88, 0x80, 0x80, 0x80], [0xff], [0xfe], [0x80], [0xbf], [0xe6, 0x97], [0xf0, 0x9f, 0x98], [0xc3], [0xe6, 0x41, 0x41],
];
/** The edges of the valid ranges, which must keep being accepted. */
const VALID_EDGES = [
  [0xc2, 0x80], [0xdf, 0xbf], [0xe0, 0xa0, 0x80], [0xed, 0x9f, 0xbf], [0xee, 0x80, 0x80], [0xef, 0xbf, 0xbf],
  [0xf0, 0x90, 0x80, 0x80], [0xf4, 0x8f, 0xbf, 0xbf],
];
const BOM = [0xef, 0xbb, 0xbf];

/** Byte snippets that mutations insert: structure, escapes, keys and encodings. */
const SNIPPETS: readonly (string | number[])[] = [
  '"', "\\", "{", "}", "[", "]", ",", ":", " ", "0", "-", "e", ".", "null", "true", "\\u0000", "\\ud800", "\\u006d",
  "\\u", "model", '"model":', '"model":"llama-3.1-8b",', '"m\\u006fdel":"qwen3-32b",', '"stream":', '"messages":[]', '"prompt":"x"',
  "1e999", [0x00], [0x0a], [0x80], [0xc0, 0x80], [0xed, 0xa0, 0x80], BOM, [0xf4, 0x90, 0x80, 0x80], [0xff], [0xe6, 0x97],
  [0xe6, 0x97, 0xa5],
];

/** Case `index` of a run: the same (stage, seed, index) always gives the same body. */
export function generateCase(stage: Stage, seed: number, index: number): FuzzCase {
  const rng = new Rng(deriveSeed((seed ^ STAGE_SALT[stage]) >>> 0, `case ${index}`));
  const models = [...servedModels(STAGE_POOLS[stage]).keys()];
  const kind = rng.pick(STAGE_KINDS[stage]);
  const generator = rng.weightedKey(GENERATORS);
  let body = GENERATE[generator](rng, kind, models);
  // Structured cases sometimes get one random byte-level mutation on top.
  if (generator !== "mutated" && generator !== "real" && rng.chance(0.15)) {
    body = mutateOnce(rng, body, bytesOf(serialize(rng, realBody(rng, kind, models))));
  }
  return { stage, seed, index, kind, generator, body: Uint8Array.from(body) };
}

type Make = (rng: Rng, kind: Kind, models: readonly string[]) => number[];

const GENERATE: Record<Generator, Make> = {
  real: (rng, kind, models) => bytesOf(serialize(rng, realBody(rng, kind, models))),

  mutated: (rng, kind, models) => {
    let body = bytesOf(serialize(rng, realBody(rng, kind, models)));
    const donor = bytesOf(serialize(rng, realBody(rng, rng.pick(["chat", "completions"] as const), models)));
    for (let n = rng.range(1, 4); n > 0; n--) body = mutateOnce(rng, body, donor);
    return body;
  },

  "duplicate-keys": (rng, kind, models) => {
    const entries = entriesOf(realBody(rng, kind, models)).filter(([k]) => !["model", "stream", "messages", "prompt"].includes(k));
    for (const field of ["model", "stream", "messages", "prompt"] as const) {
      const required = (field === "messages" && kind === "chat") || (field === "prompt" && kind === "completions") || field === "model";
      const copies = rng.weightedKey(required ? { "0": 1, "1": 4, "2": 4, "3": 2 } : { "0": 5, "1": 3, "2": 2, "3": 1 });
      for (let i = 0; i < Number(copies); i++) entries.push([field, fieldValue(rng, field, models)]);
    }
    if (rng.chance(0.5)) entries.push([rng.pick(KEY_NEAR_MISSES), fieldValue(rng, "model", models)]);
    return bytesOf(objectText(rng, rng.shuffle(entries), rng.chance(0.5) ? 0.3 : 0));
  },

  "escaped-names": (rng, kind, models) => {
    const entries = entriesOf(realBody(rng, kind, models));
    const model = rng.chance(0.8) ? rng.pick(models) : rng.pick(UNKNOWN_MODELS);
    const at = entries.findIndex(([k]) => k === "model");
    entries[at] = ["model", stringText(rng, model, rng.pick([0.2, 0.5, 1]))];
    return bytesOf(objectText(rng, entries, rng.pick([0, 0.3, 1])));
  },

  "invalid-utf8": (rng, kind, models) => {
    const body = bytesOf(serialize(rng, realBody(rng, kind, models)));
    const seq = rng.chance(0.8) ? rng.pick(INVALID_UTF8) : rng.pick(VALID_EDGES);
    const quotes = body.flatMap((b, i) => (b === 0x22 ? [i + 1] : []));
    const where = rng.weightedKey({ string: 6, anywhere: 2, end: 1 });
    const pos = where === "string" ? rng.pick(quotes) : where === "end" ? body.length : rng.int(body.length + 1);
    return [...body.slice(0, pos), ...seq, ...body.slice(pos)];
  },

  "huge-numbers": (rng, kind, models) => {
    const entries = entriesOf(realBody(rng, kind, models));
    for (let n = rng.range(1, 3); n > 0; n--) {
      const number = numberText(rng);
      const where = rng.weightedKey({ filler: 4, max_tokens: 2, model: 1, array: 2 });
      if (where === "filler") entries.push([rng.pick(["n", "seed", "temperature", "logit_bias"]), number]);
      else if (where === "array") entries.push(["stop", `[1, ${number}, "x"]`]);
      else entries.push([where, number]);
    }
    return bytesOf(objectText(rng, entries, 0));
  },

  deep: (rng, kind, models) => {
    const entries = entriesOf(realBody(rng, kind, models));
    const depth = rng.weightedKey({ boundary: 6, thousands: 2, huge: 1 });
    const levels = depth === "boundary" ? rng.range(58, 68) : depth === "thousands" ? rng.range(100, 3000) : 100_000;
    // Past the limit only arrays keep the body small.
    const shapes = depth === "huge" ? ["["] : rng.pick([["["], ['{"a":'], ["[", '{"a":', '{"\\u0061":']]);
    const opens = Array.from({ length: levels }, () => rng.pick(shapes));
    const closes = opens.map((o) => (o === "[" ? "]" : "}")).reverse();
    const cut = rng.chance(0.15) ? rng.int(closes.length) : closes.length;
    const nested = opens.join("") + rng.pick(["1", '"x"', "[]", "{}", "null"]) + closes.slice(0, cut).join("");
    const where = rng.weightedKey({ filler: 3, messages: 2, model: 1 });
    if (where === "messages") entries.push(["messages", `[{"role":"user","content":${nested}}]`]);
    else entries.push([where === "filler" ? "extra" : "model", nested]);
    return bytesOf(objectText(rng, entries, 0));
  },

  nul: (rng, kind, models) => {
    const entries = entriesOf(realBody(rng, kind, models));
    const variant = rng.weightedKey({ escapedModel: 3, rawInString: 2, rawOutside: 1, escapedContent: 1 });
    if (variant === "escapedModel") {
      const at = entries.findIndex(([k]) => k === "model");
      entries[at] = ["model", stringText(rng, rng.pick([...models, "llama-3.1-8b"]) + "\u0000".repeat(rng.range(0, 2)), 0)];
      if (rng.chance(0.3)) entries[at][1] = `"\\u0000${entries[at][1].slice(1)}`;
      return bytesOf(objectText(rng, entries, 0));
    }
    if (variant === "escapedContent") {
      entries.push(["user", '"\\u0000\\u0000"']);
      return bytesOf(objectText(rng, entries, 0));
    }
    const body = bytesOf(objectText(rng, entries, 0));
    const quotes = body.flatMap((b, i) => (b === 0x22 ? [i + 1] : []));
    const pos = variant === "rawInString" ? rng.pick(quotes) : rng.int(body.length + 1);
    return [...body.slice(0, pos), 0x00, ...body.slice(pos)];
  },

  bom: (rng, kind, models) => {
    const body = bytesOf(serialize(rng, realBody(rng, kind, models)));
    const variant = rng.weightedKey({ leading: 5, twice: 2, afterSpace: 1, inString: 2, outside: 1, utf16: 1 });
    if (variant === "leading") return [...BOM, ...body];
    if (variant === "twice") return [...BOM, ...BOM, ...body];
    if (variant === "afterSpace") return [0x20, ...BOM, ...body];
    if (variant === "utf16") return [...rng.pick([[0xff, 0xfe], [0xfe, 0xff]]), ...body];
    const quotes = body.flatMap((b, i) => (b === 0x22 ? [i + 1] : []));
    const pos = variant === "inString" ? rng.pick(quotes) : rng.int(body.length + 1);
    return [...body.slice(0, pos), ...BOM, ...body.slice(pos)];
  },
};

function mutateOnce(rng: Rng, body: number[], donor: number[]): number[] {
  const at = rng.int(body.length + 1);
  const len = rng.range(1, 16);
  switch (rng.weightedKey({ flip: 3, set: 3, insert: 4, delete: 3, duplicate: 1, splice: 2, truncate: 2 })) {
    case "flip":
      if (at < body.length) body[at] ^= 1 << rng.int(8);
      return body;
    case "set":
      if (at < body.length) body[at] = rng.chance(0.5) ? rng.int(256) : rng.pick([0x00, 0x22, 0x5c, 0x7b, 0x7d, 0x80, 0xbf, 0xc0, 0xed, 0xef, 0xff]);
      return body;
    case "insert": {
      const snippet = rng.pick(SNIPPETS);
      return [...body.slice(0, at), ...(typeof snippet === "string" ? bytesOf(snippet) : snippet), ...body.slice(at)];
    }
    case "delete":
      return [...body.slice(0, at), ...body.slice(at + len)];
    case "duplicate":
      return [...body.slice(0, at + len), ...body.slice(at, at + len), ...body.slice(at + len)];
    case "splice": {
      const from = rng.int(donor.length);
      return [...body.slice(0, at), ...donor.slice(from, from + rng.range(1, 64)), ...body.slice(at + rng.int(8))];
    }
    default:
      return body.slice(0, at);
  }
}

function text(rng: Rng, maxWords: number): string {
  return Array.from({ length: rng.range(1, maxWords) }, () => rng.pick(WORDS)).join(" ");
}

/** A plausible OpenAI request as a client library would build it. */
function realBody(rng: Rng, kind: Kind, models: readonly string[]): Record<string, unknown> {
  const model = rng.chance(0.85) ? rng.pick(models) : rng.pick(UNKNOWN_MODELS);
  const body: Record<string, unknown> = { model };
  if (kind === "completions" || (kind === "other" && rng.chance(0.3))) {
    body.prompt = rng.chance(0.8) ? text(rng, 12) : [text(rng, 8)];
    if (rng.chance(0.2)) body.echo = false;
    if (rng.chance(0.2)) body.logprobs = null;
  } else if (kind === "chat" || rng.chance(0.5)) {
    const messages: object[] = [];
    if (rng.chance(0.5)) messages.push({ role: "system", content: "You are a helpful assistant." });
    for (let n = rng.range(1, 3); n > 0; n--) {
      const content = rng.chance(0.8) ? text(rng, 12) : [{ type: "text", text: text(rng, 6) }];
      messages.push({ role: rng.pick(["user", "assistant", "user"]), content });
    }
    body.messages = messages;
    if (rng.chance(0.15)) body.tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
    if (rng.chance(0.1)) body.response_format = { type: "json_object" };
  } else {
    body.input = rng.chance(0.5) ? text(rng, 8) : [text(rng, 4), text(rng, 4)];
    body.encoding_format = "float";
  }
  body.max_tokens = rng.range(1, 3);
  if (rng.chance(0.3)) body.stream = rng.chance(0.5);
  if (body.stream === true && rng.chance(0.5)) body.stream_options = { include_usage: true };
  if (rng.chance(0.3)) body.temperature = rng.pick([0, 0.7, 1.2]);
  if (rng.chance(0.2)) body.top_p = 0.95;
  if (rng.chance(0.2)) body.stop = ["\n\n", "</s>"];
  if (rng.chance(0.1)) body.seed = rng.int(1_000_000);
  if (rng.chance(0.1)) body.user = text(rng, 2);
  if (rng.chance(0.1)) body.logit_bias = { "50256": -100 };
  return Object.fromEntries(rng.shuffle(Object.entries(body)));
}

/** JSON.stringify, sometimes indented, sometimes ASCII-only like Python's json.dumps. */
function serialize(rng: Rng, value: unknown): string {
  const s = JSON.stringify(value, null, rng.chance(0.2) ? rng.pick([1, 2, "\t"]) : undefined);
  return rng.chance(0.25) ? s.replace(/[\u0080-\uffff]/g, (c) => "\\u" + hex4(c.charCodeAt(0), rng)) : s;
}

/** [key, value JSON text] pairs of an object, for generators that need duplicate keys. */
function entriesOf(body: Record<string, unknown>): [string, string][] {
  return Object.entries(body).map(([k, v]) => [k, JSON.stringify(v)]);
}

/** An object's JSON text from entries; keys escaped with probability `keyEscapes` per character. */
function objectText(rng: Rng, entries: [string, string][], keyEscapes: number): string {
  const ws = () => (rng.chance(0.1) ? rng.pick([" ", "\n", "\t", "\r\n  "]) : "");
  return "{" + entries.map(([k, v]) => `${ws()}${stringText(rng, k, keyEscapes)}${ws()}:${ws()}${v}${ws()}`).join(",") + "}";
}

/** A JSON string literal for `s`, each character escaped with probability `escapes` (lone surrogates always). */
function stringText(rng: Rng, s: string, escapes: number): string {
  let out = '"';
  for (const ch of s) {
    const code = ch.codePointAt(0)!;
    const lone = code >= 0xd800 && code <= 0xdfff;
    if (!lone && code >= 0x20 && ch !== '"' && ch !== "\\" && !rng.chance(escapes)) {
      out += ch;
    } else if (code > 0xffff) {
      out += "\\u" + hex4(ch.charCodeAt(0), rng) + "\\u" + hex4(ch.charCodeAt(1), rng);
    } else if (!lone && rng.chance(0.5) && SHORT_ESCAPES[ch] !== undefined) {
      out += SHORT_ESCAPES[ch];
    } else {
      out += "\\u" + hex4(code, rng);
    }
  }
  return out + '"';
}

const SHORT_ESCAPES: Record<string, string> = {
  '"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
};

function hex4(code: number, rng: Rng): string {
  const hex = code.toString(16).padStart(4, "0");
  return rng.chance(0.3) ? hex.toUpperCase() : hex;
}

/** The JSON text of one of the four fields the gateway reads, of a valid or wrong type. */
function fieldValue(rng: Rng, field: "model" | "stream" | "messages" | "prompt", models: readonly string[]): string {
  const wrong = () => rng.pick(["1", "null", "true", "[]", "{}", '""', "-0.5e3"]);
  switch (field) {
    case "model":
      return rng.chance(0.7) ? stringText(rng, rng.chance(0.8) ? rng.pick(models) : rng.pick(UNKNOWN_MODELS), 0.1) : wrong();
    case "stream":
      return rng.pick(["true", "false", "null", '"yes"', "1", "0", "[]"]);
    case "messages":
      return rng.chance(0.7) ? JSON.stringify([{ role: "user", content: text(rng, 4) }]) : rng.pick(['"hi"', "{}", "null", "[]", "7"]);
    case "prompt":
      return rng.chance(0.7) ? stringText(rng, text(rng, 4), 0.1) : rng.pick(['["a"]', "{}", "null", "7", "[[1,2]]", "true"]);
  }
}

function numberText(rng: Rng): string {
  const digits = (n: number) => String(rng.range(1, 9)) + Array.from({ length: n - 1 }, () => rng.int(10)).join("");
  return rng.pick([
    () => digits(rng.range(4290, 4310)),
    () => "-" + digits(rng.range(4295, 4305)),
    () => digits(5000) + ".0",
    () => digits(5000) + "e5",
    () => "0." + "0".repeat(500) + "1",
    () => rng.pick(["1e999999", "-1e-999999", "1E+400", "123456789012345678901234567890", "-0", "0", "1e308", "2.2250738585072014e-308"]),
    () => rng.pick(["01", "1.", ".5", "+1", "1e", "0x10", "NaN", "Infinity", "-Infinity", "-", "1e+", "--1", "1.2.3"]),
  ])();
}

function bytesOf(s: string): number[] {
  return [...Buffer.from(s, "utf8")];
}
