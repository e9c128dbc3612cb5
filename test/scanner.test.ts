// The body scanner as compiled into the filter, driven through the native build.
import { beforeAll, describe, expect, it } from "vitest";
import { NativeRouter } from "../host/native/router.js";
import { endpoint, pool, snapshot } from "../bench/snapshot-builders.js";

let router: NativeRouter;

beforeAll(async () => {
  router = await NativeRouter.load();
  router.setSnapshot(snapshot([pool("p", "llama", [endpoint("127.0.0.1:1")])], ["sql-lora"]));
});

function errorOf(body: string, kind: "chat" | "completions" | "other" = "chat") {
  const r = router.route(body, kind);
  if (!("status" in r)) throw new Error(`expected an error, got ${JSON.stringify(r)}`);
  return r;
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

  it("keeps working after many bad bodies (no VM abort)", () => {
    for (let i = 0; i < 2000; i++) errorOf('{"model":' + "x".repeat(i % 50));
    expect(router.route('{"model":"llama","messages":[]}')).toMatchObject({ endpoint: "127.0.0.1:1" });
  });
});
