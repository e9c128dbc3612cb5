// The body scanner as compiled into the filter, driven through the native build.
import { beforeAll, describe, expect, it } from "vitest";
import { NativeRouter } from "../../testing/native/router.js";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";

let router: NativeRouter;
const UNICODE_MODEL = "m\u00f6del-\u65e5\u672c-\u{1f600}";

beforeAll(async () => {
  router = await NativeRouter.load();
  router.setSnapshot(snapshot([pool("p", "llama", [endpoint("127.0.0.1:1")])], ["sql-lora", UNICODE_MODEL]));
});

function errorOf(body: string | Uint8Array, kind: "chat" | "completions" | "responses" | "other" = "chat") {
  const r = router.route(body, kind);
  if (!("status" in r)) throw new Error(`expected an error, got ${JSON.stringify(r)}`);
  return r;
}

function modelOf(body: string | Uint8Array, kind: "chat" | "completions" | "other" = "chat"): string {
  const r = router.route(body, kind);
  if (!("model" in r)) throw new Error(`expected a routed body, got ${JSON.stringify(r)}`);
  return r.model;
}

/** A chat body with `raw` bytes spliced in as the model name's content. */
function withModelBytes(raw: number[]): Buffer {
  return Buffer.concat([Buffer.from('{"model":"'), Buffer.from(raw), Buffer.from('","messages":[]}')]);
}

describe("request body scanner", () => {
  it("reads model, stream and the messages span of a chat request", () => {
    const body = '{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi"}]}';
    const r = router.route(body);
    expect(r).toMatchObject({ endpoint: "127.0.0.1:1", model: "llama", stream: true });
    if (!("prompt" in r)) throw new Error("no prompt span");
    expect(body.slice(r.prompt[0], r.prompt[1])).toBe('[{"role":"user","content":"hi"}]');
  });

  it("reads a completions prompt given as a string", () => {
    const body = '{"prompt":"Once upon", "max_tokens": 5, "model":"llama"}';
    const r = router.route(body, "completions");
    if (!("prompt" in r)) throw new Error(JSON.stringify(r));
    expect(body.slice(r.prompt[0], r.prompt[1])).toBe('"Once upon"');
    expect(r.stream).toBe(false);
  });

  it("decodes escapes in the model name", () => {
    const r = router.route('{"model":"ll\\u0061ma","messages":[]}');
    expect(r).toMatchObject({ model: "llama" });
  });

  it("resolves a LoRA adapter name to its base model's pool", () => {
    expect(router.route('{"model":"sql-lora","messages":[]}')).toMatchObject({ endpoint: "127.0.0.1:1", model: "sql-lora" });
  });

  it.each([
    ["empty body", ""],
    ["not an object", "[1,2]"],
    ["truncated", '{"model":"llama","messages":[{"role":"user"'],
    ["trailing garbage", '{"model":"llama","messages":[]} x'],
    ["bad literal", '{"model":"llama","stream":tru,"messages":[]}'],
    ["bad number", '{"model":"llama","n":01,"messages":[]}'],
    ["bad escape", '{"model":"ll\\qama","messages":[]}'],
    ["raw control character", '{"model":"ll\u0001ama","messages":[]}'],
    ["missing colon", '{"model" "llama"}'],
    ["single quotes", "{'model':'llama'}"],
  ])("rejects malformed JSON (%s) with 400 in OpenAI format", (_name, body) => {
    const r = errorOf(body);
    expect(r.status).toBe(400);
    expect(r.error.type).toBe("invalid_request_error");
    expect(r.error.message).toMatch(/not valid JSON/);
  });

  it("rejects nesting deeper than the limit instead of overflowing the stack", () => {
    const deep = '{"model":"llama","messages":[],"x":' + "[".repeat(100_000) + "]".repeat(100_000) + "}";
    const r = errorOf(deep);
    expect(r.status).toBe(400);
    expect(r.error.message).toMatch(/nested too deeply/);
  });

  it("names the field when model is missing, empty or not a string", () => {
    for (const body of ['{"messages":[]}', '{"model":"","messages":[]}', '{"model":7,"messages":[]}']) {
      const r = errorOf(body);
      expect(r.status).toBe(400);
      expect(r.error.param).toBe("model");
    }
  });

  it("requires messages for chat and prompt for completions", () => {
    expect(errorOf('{"model":"llama"}', "chat").error.param).toBe("messages");
    expect(errorOf('{"model":"llama","messages":[]}', "completions").error.param).toBe("prompt");
    expect(errorOf('{"model":"llama","messages":"hi"}', "chat").error.param).toBe("messages");
    expect(router.route('{"model":"llama","input":"embed me"}', "other")).toMatchObject({ endpoint: "127.0.0.1:1" });
  });

  it("rejects a non-boolean stream", () => {
    expect(errorOf('{"model":"llama","stream":"yes","messages":[]}').error.param).toBe("stream");
  });

  it("answers an unknown model with 404 model_not_found, escaping the name", () => {
    const r = errorOf('{"model":"gpt-\\"x\\"","messages":[]}');
    expect(r.status).toBe(404);
    expect(r.error.code).toBe("model_not_found");
    expect(r.error.message).toContain('gpt-"x"');
  });

  it("reads escaped non-ASCII model names, surrogate pairs included, as their raw UTF-8 form", () => {
    expect(modelOf(JSON.stringify({ model: UNICODE_MODEL, messages: [] }))).toBe(UNICODE_MODEL);
    expect(modelOf('{"model":"m\\u00f6del-\\u65E5\\u672c-\\ud83d\\ude00","messages":[]}')).toBe(UNICODE_MODEL);
  });

  it("keeps working after many bad bodies (no VM abort)", () => {
    for (let i = 0; i < 2000; i++) errorOf('{"model":' + "x".repeat(i % 50));
    expect(router.route('{"model":"llama","messages":[]}')).toMatchObject({ endpoint: "127.0.0.1:1" });
  });
});

describe("keys and duplicates, read as Python's json.loads reads them", () => {
  it("compares keys after unescaping them", () => {
    expect(modelOf('{"model":"zzz","m\\u006fdel":"llama","messages":[]}')).toBe("llama");
    expect(modelOf('{"\\u006d\\u006F\\u0064\\u0065\\u006c":"llama","\\u006dessages":[]}')).toBe("llama");
    // Near misses stay other keys.
    expect(modelOf('{"model":"llama","model\\u0000":"x","mode\\u006c2":"y","\\/model":"z","messages":[]}')).toBe("llama");
    expect(errorOf('{"m\\u006fdel":"llama"}').error.param).toBe("messages");
  });

  it("keeps the last of duplicate keys, and validates only that one", () => {
    expect(modelOf('{"model":1,"model":"llama","messages":[]}')).toBe("llama");
    expect(modelOf('{"model":"llama","model":"sql-lora","messages":[]}')).toBe("sql-lora");
    expect(errorOf('{"model":"llama","model":7,"messages":[]}').error).toMatchObject({ param: "model", message: "'model' must be a string" });
    expect(errorOf('{"model":"llama","model":"","messages":[]}').error.param).toBe("model");
    expect(router.route('{"model":"llama","stream":"yes","stream":true,"messages":[]}')).toMatchObject({ stream: true });
    expect(router.route('{"model":"llama","stream":true,"stream":null,"messages":[]}')).toMatchObject({ stream: false });
    expect(errorOf('{"model":"llama","stream":true,"stream":1,"messages":[]}').error.param).toBe("stream");
    expect(errorOf('{"model":"llama","messages":[],"messages":{}}').error.param).toBe("messages");
    const body = '{"model":"llama","messages":"x","messages":[1]}';
    const r = router.route(body);
    if (!("prompt" in r)) throw new Error(JSON.stringify(r));
    expect(body.slice(r.prompt[0], r.prompt[1])).toBe("[1]");
  });

  it("accepts a chat body that also has a prompt, and takes each API's own field", () => {
    const body = '{"model":"llama","prompt":5,"messages":[{"role":"user","content":"hi"}]}';
    const chat = router.route(body, "chat");
    if (!("prompt" in chat)) throw new Error(JSON.stringify(chat));
    expect(body.slice(chat.prompt[0], chat.prompt[1])).toBe('[{"role":"user","content":"hi"}]');
    const both = '{"model":"llama","prompt":"Once","messages":7}';
    const completion = router.route(both, "completions");
    if (!("prompt" in completion)) throw new Error(JSON.stringify(completion));
    expect(both.slice(completion.prompt[0], completion.prompt[1])).toBe('"Once"');
    expect(errorOf(both, "chat").error.param).toBe("messages");
    expect(router.route('{"model":"llama","messages":"x","prompt":{}}', "other")).toMatchObject({ endpoint: "127.0.0.1:1" });
  });
});

describe("encoding", () => {
  it.each([
    ["overlong 2-byte (C0)", [0xc0, 0x80]],
    ["overlong 2-byte (C1)", [0xc1, 0xbf]],
    ["overlong 3-byte (E0 80..9F)", [0xe0, 0x9f, 0xbf]],
    ["overlong 4-byte (F0 80..8F)", [0xf0, 0x8f, 0xbf, 0xbf]],
    ["UTF-16 surrogate (ED A0)", [0xed, 0xa0, 0x80]],
    ["UTF-16 surrogate (ED BF)", [0xed, 0xbf, 0xbf]],
    ["above U+10FFFF (F4 90)", [0xf4, 0x90, 0x80, 0x80]],
    ["above U+10FFFF (F5)", [0xf5, 0x80, 0x80, 0x80]],
    ["FF", [0xff]],
    ["stray continuation byte", [0x80]],
    ["truncated 3-byte sequence", [0xe6, 0x97]],
    ["truncated 4-byte sequence", [0xf0, 0x9f, 0x98]],
    ["lead byte followed by ASCII", [0xc3, 0x41]],
  ])("rejects invalid UTF-8 (%s) with 400, naming the offset, never echoing the bytes", (_name, bytes) => {
    const body = withModelBytes([0x61, ...bytes, 0x62]);
    expect(() => new TextDecoder("utf-8", { fatal: true }).decode(body)).toThrow();
    const text = router.routeText(body);
    expect(text.isWellFormed()).toBe(true);
    expect(/^[\x20-\x7e]*$/.test(text)).toBe(true);
    const r = JSON.parse(text);
    expect(r.status).toBe(400);
    expect(r.error.type).toBe("invalid_request_error");
    expect(r.error.message).toBe("request body is not valid UTF-8: invalid byte sequence at byte 11");
  });

  it("accepts every boundary of the valid ranges", () => {
    const edges = ["\u0080", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\uffff", "\u{10000}", "\u{10ffff}"];
    const body = Buffer.from(JSON.stringify({ model: "llama", messages: [], edges }));
    expect(body.length).toBeGreaterThan(40);
    expect(modelOf(body)).toBe("llama");
  });

  it("rejects a sequence cut off by the end of the body as invalid UTF-8", () => {
    const body = Buffer.from([...Buffer.from('{"model":"llama","messages":[],"x":"'), 0xe6, 0x97]);
    expect(errorOf(body).error.message).toMatch(/not valid UTF-8: invalid byte sequence at byte 36$/);
  });

  it("reports invalid UTF-8 before a syntax error, wherever it is, as the server decodes first", () => {
    const body = Buffer.from([...Buffer.from('{"model" "llama", "x": "'), 0xff, ...Buffer.from('"}')]);
    expect(errorOf(body).error.message).toBe("request body is not valid UTF-8: invalid byte sequence at byte 24");
    const outside = Buffer.from([...Buffer.from('{"model":"llama",'), 0xc3, 0xa9, 0x80, ...Buffer.from("}")]);
    expect(errorOf(outside).error.message).toBe("request body is not valid UTF-8: invalid byte sequence at byte 19");
    const validOutside = Buffer.from([...Buffer.from('{"model":"llama",'), 0xc3, 0xa9, ...Buffer.from("}")]);
    expect(errorOf(validOutside).error.message).toBe("request body is not valid JSON: expected a member name at byte 17");
  });

  it("rejects invalid UTF-8 in keys and nested strings too", () => {
    const key = Buffer.from([...Buffer.from('{"model":"llama","messages":[],"'), 0xed, 0xa0, 0x80, ...Buffer.from('":1}')]);
    expect(errorOf(key).error.message).toMatch(/not valid UTF-8/);
    const nested = Buffer.from([...Buffer.from('{"model":"llama","messages":[{"content":"'), 0xc0, 0xaf, ...Buffer.from('"}]}')]);
    expect(errorOf(nested).error.message).toMatch(/not valid UTF-8: invalid byte sequence at byte 41$/);
  });

  it("accepts one leading UTF-8 BOM, as the server's decoder strips it, and no other", () => {
    const bom = [0xef, 0xbb, 0xbf];
    const json = Buffer.from('{"model":"llama","messages":[]}');
    expect(modelOf(Buffer.from([...bom, ...json]))).toBe("llama");
    expect(errorOf(Buffer.from([...bom, ...bom, ...json])).error.message).toBe("request body is not valid JSON: expected a JSON object at byte 3");
    expect(errorOf(Buffer.from([0x20, ...bom, ...json])).error.message).toMatch(/not valid JSON/);
    expect(errorOf(Buffer.from(bom)).error.message).toBe("request body is not valid JSON: body is empty at byte 3");
  });

  it("keeps an escaped lone surrogate as a name no model has, escaped in the error text", () => {
    for (const escape of ["\\ud800", "\\udfff", "x\\ud83dy", "\\ude00\\ud83d"]) {
      const text = router.routeText(`{"model":"${escape}","messages":[]}`);
      expect(text.isWellFormed()).toBe(true);
      expect(Buffer.from(text).toString()).toBe(text);
      const r = JSON.parse(text);
      expect(r).toMatchObject({ status: 404, error: { code: "model_not_found" } });
      expect(text).toContain(`'${escape}'`);
    }
  });

  it("treats \\u0000 in a model name as a name no model has, escaped in the message; raw NUL stays an error", () => {
    const text = router.routeText('{"model":"llama\\u0000","messages":[]}');
    expect(text).toContain("llama\\u0000");
    expect(text).not.toContain("\u0000");
    expect(JSON.parse(text)).toMatchObject({ status: 404, error: { message: "The model 'llama\u0000' does not exist or is not served by this gateway" } });
    expect(errorOf(withModelBytes([0x61, 0x00])).error.message).toBe("request body is not valid JSON: control character in string at byte 11");
    expect(errorOf(Buffer.from('{"model":"llama","messages":[]}\u0000')).error.message).toMatch(/unexpected data after the JSON object at byte 31$/);
  });

  it("repeats at most 256 units of an unknown model's name, without splitting a surrogate pair", () => {
    const long = router.route(JSON.stringify({ model: "x".repeat(100_000), messages: [] }));
    expect("status" in long && long.error.message).toBe(`The model '${"x".repeat(256)}...' does not exist or is not served by this gateway`);
    const split = router.route(JSON.stringify({ model: `${"x".repeat(255)}\u{1f600}tail`, messages: [] }));
    expect("status" in split && split.error.message).toBe(`The model '${"x".repeat(255)}...' does not exist or is not served by this gateway`);
  });
});

describe("limits", () => {
  it("accepts huge floats and integers up to the server's 4300 digits, and no longer integers", () => {
    const body = (n: string) => `{"model":"llama","messages":[],"n":${n}}`;
    for (const ok of ["1e999999", "-1E-999999", "9".repeat(4300), "-" + "9".repeat(4300), "9".repeat(10_000) + ".5", "9".repeat(10_000) + "e1"]) {
      expect(modelOf(body(ok))).toBe("llama");
    }
    for (const long of ["9".repeat(4301), "-" + "1".repeat(100_000)]) {
      expect(errorOf(body(long)).error.message).toBe("request body is not valid JSON: integer with more than 4300 digits at byte 35");
    }
  });

  it("allows 64 levels of nesting, counting the body object", () => {
    const nested = (levels: number) => '{"model":"llama","messages":[],"x":' + "[".repeat(levels - 1) + "]".repeat(levels - 1) + "}";
    expect(modelOf(nested(64))).toBe("llama");
    expect(errorOf(nested(65)).error.message).toBe("request body is not valid JSON: JSON nested too deeply at byte 98");
  });

  it("rejects every truncation of a valid body, without trapping", () => {
    const full = Buffer.from(JSON.stringify({ model: UNICODE_MODEL, stream: false, messages: [{ role: "user", content: "h\u00e9 \"x\" \ud83d\ude00" }], n: -1.5e3 }));
    for (let cut = 0; cut < full.length; cut++) {
      expect(errorOf(full.subarray(0, cut)).status).toBe(400);
    }
    expect(modelOf(full)).toBe(UNICODE_MODEL);
  });

  it("decodes a multi-megabyte escaped model name in linear time and reports a bounded part of it", () => {
    const name = '\\"'.repeat(1_000_000);
    const r = errorOf(`{"model":"${name}","messages":[]}`);
    expect(r.status).toBe(404);
    expect(r.error.message).toBe(`The model '${'"'.repeat(256)}...' does not exist or is not served by this gateway`);
  });

});

describe("a Responses request", () => {
  it("reads input, with the instructions written before it as the prompt's start", () => {
    const body = '{"model":"llama","instructions":"Be brief.","input":[{"role":"user","content":"hi"}],"stream":true,"max_output_tokens":4}';
    const r = router.route(body, "responses");
    expect(r).toMatchObject({ endpoint: "127.0.0.1:1", model: "llama", stream: true, includeUsage: true });
    if (!("prompt" in r)) throw new Error("no prompt span");
    expect(body.slice(r.prompt[0], r.prompt[1])).toBe('"Be brief.","input":[{"role":"user","content":"hi"}]');
    // Instructions written after the input are left out of the prefix: it starts with the input.
    const after = '{"model":"llama","input":"hello","instructions":"Be brief."}';
    const r2 = router.route(after, "responses");
    if (!("prompt" in r2)) throw new Error("no prompt span");
    expect(after.slice(r2.prompt[0], r2.prompt[1])).toBe('"hello"');
  });

  it("answers a Responses request without a usable input with the OpenAI 400", () => {
    expect(errorOf('{"model":"llama"}', "responses")).toMatchObject({ status: 400, error: { param: "input", message: "'input' is a required property" } });
    expect(errorOf('{"model":"llama","input":3}', "responses")).toMatchObject({ status: 400, error: { param: "input" } });
  });
});
