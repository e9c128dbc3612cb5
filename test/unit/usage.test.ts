// The answer-side scanner the filter runs (assembly/core/openai/usage.ts), driven
// through the native build: token counts from whole bodies, from the bounded
// tail the filter keeps as a stream passes, from a fake pod's real answers,
// and never a trap on truncated or hostile bytes.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NativeRouter } from "../../testing/native/router.js";
import { NativeUsageScanner } from "../../testing/native/usage.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";

const TAIL_BYTES = 2048;
let scanner: NativeUsageScanner;

beforeAll(async () => {
  scanner = await NativeUsageScanner.load();
});

const USAGE = { prompt_tokens: 19, completion_tokens: 10, total_tokens: 29, prompt_tokens_details: { cached_tokens: 3 } };

function chatAnswer(content: string, usage: unknown = USAGE): string {
  return JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion",
    created: 1,
    model: "llama",
    choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
    usage,
    system_fingerprint: null,
  });
}

function sse(events: unknown[]): string {
  return events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("") + "data: [DONE]\n\n";
}

/**
 * A streamed chat answer: a chunk per token (usage null, or cumulative
 * counts as vLLM's continuous_usage_stats gives), then the usage chunk that
 * include_usage asks for, unless `final` is false.
 */
function streamAnswer(tokens: string[], opts: { final?: boolean; cumulative?: boolean } = {}): string {
  const chunk = (delta: object, u: unknown) => ({ id: "c", object: "chat.completion.chunk", created: 1, model: "llama", choices: [{ index: 0, delta }], usage: u });
  const events: unknown[] = tokens.map((t, i) => chunk({ content: t }, opts.cumulative ? { prompt_tokens: 19, completion_tokens: i + 1 } : null));
  if (opts.final ?? true) events.push({ id: "c", object: "chat.completion.chunk", created: 1, model: "llama", choices: [], usage: USAGE });
  return sse(events);
}

/** `text` cut at the given sizes, cycling through them. */
function split(text: string, sizes: number[]): string[] {
  const out: string[] = [];
  for (let at = 0, k = 0; at < text.length; k++) {
    const n = sizes[k % sizes.length];
    out.push(text.slice(at, at + n));
    at += n;
  }
  return out;
}

describe("usage in a whole answer", () => {
  it("reads prompt and completion tokens from a chat answer, nested details skipped", () => {
    expect(scanner.find(chatAnswer("Hello there"))).toEqual({ promptTokens: 19, completionTokens: 10 });
  });

  it("counts no completion tokens for an embeddings answer", () => {
    const body = JSON.stringify({ object: "list", data: [{ object: "embedding", embedding: [0.1, -0.2], index: 0 }], model: "e5", usage: { prompt_tokens: 8, total_tokens: 8 } });
    expect(scanner.find(body)).toEqual({ promptTokens: 8, completionTokens: 0 });
  });

  it("takes the stream's last usage: the final chunk, or the newest cumulative one", () => {
    expect(scanner.find(streamAnswer(["a", "b", "c"]))).toEqual({ promptTokens: 19, completionTokens: 10 });
    expect(scanner.find(streamAnswer(["a", "b", "c"], { final: false, cumulative: true }))).toEqual({ promptTokens: 19, completionTokens: 3 });
  });

  it("finds nothing in a stream whose chunks all say usage: null, or in an error", () => {
    expect(scanner.find(streamAnswer(["a", "b"], { final: false }))).toBeNull();
    expect(scanner.find('{"error":{"message":"no","type":"invalid_request_error","param":null,"code":null}}')).toBeNull();
  });

  it("is not fooled by a model that writes usage JSON in its answer", () => {
    const fake = '{"usage":{"prompt_tokens":999999,"completion_tokens":999999}}';
    expect(scanner.find(chatAnswer(`Here: ${fake}, "usage": {"prompt_tokens": 1}`))).toEqual({ promptTokens: 19, completionTokens: 10 });
    expect(scanner.find(chatAnswer(fake, null))).toBeNull();
    expect(scanner.find(streamAnswer([fake, `"usage":{"prompt_tokens":7}`], { final: false }))).toBeNull();
  });

  it.each([
    ["no prompt_tokens", { completion_tokens: 4 }],
    ["an empty object", {}],
    ["a fraction", { prompt_tokens: 1.5, completion_tokens: 2 }],
    ["an exponent", { prompt_tokens: 1e3, completion_tokens: 2 }],
    ["a negative count", { prompt_tokens: -1, completion_tokens: 2 }],
    ["a string count", { prompt_tokens: "12", completion_tokens: 2 }],
    ["sixteen digits", { prompt_tokens: 1234567890123456, completion_tokens: 2 }],
  ])("reads no usage with %s", (_, usage) => {
    const body = chatAnswer("x", usage).replace("1000", "1e3");
    expect(scanner.find(body)).toBeNull();
  });

  it("keeps the largest count it accepts (15 digits) exact", () => {
    expect(scanner.find(chatAnswer("x", { prompt_tokens: 999999999999999, completion_tokens: 0 }))).toEqual({ promptTokens: 999999999999999, completionTokens: 0 });
  });

  it("reads usage in every whitespace layout a server may print", () => {
    const pretty = JSON.stringify(JSON.parse(chatAnswer("hi")), null, 2).replace(/\n/g, "\r\n");
    expect(scanner.find(pretty)).toEqual({ promptTokens: 19, completionTokens: 10 });
  });
});

describe("usage from the tail the filter keeps", () => {
  it("gives the same counts however the answer is cut into chunks", () => {
    const answers = [chatAnswer("Hello ".repeat(50)), streamAnswer("the quick brown fox".split(" "))];
    for (const text of answers) {
      const whole = scanner.find(text);
      expect(whole).not.toBeNull();
      for (const sizes of [[1], [2, 3], [7], [64, 1, 13], [500], [text.length]]) {
        expect(scanner.fromChunks(split(text, sizes)), `sizes ${sizes}`).toEqual(whole);
      }
    }
  });

  it("reads at most the last 2 KiB of each chunk of a large answer, and still finds the usage at its end", () => {
    const big = chatAnswer("token ".repeat(50_000));
    const reads: number[] = [];
    expect(scanner.fromChunks(split(big, [16_384]), (n) => reads.push(n))).toEqual({ promptTokens: 19, completionTokens: 10 });
    expect(Math.max(...reads)).toBe(TAIL_BYTES);
    expect(reads.reduce((a, b) => a + b, 0)).toBeLessThan(big.length / 4);
  });

  it("finds nothing when the usage lies further than the tail from the end", () => {
    const body = chatAnswer("x").replace('"system_fingerprint":null', `"after":"${"z".repeat(TAIL_BYTES)}"`);
    expect(scanner.find(body)).toEqual({ promptTokens: 19, completionTokens: 10 });
    expect(scanner.fromChunks([body])).toBeNull();
  });

  it("counts a cut-off answer only if its usage object was complete", () => {
    const text = streamAnswer(["a", "b"]);
    const usageEnd = text.lastIndexOf("}}") + 1; // the usage object's closing brace
    for (let cut = 0; cut <= text.length; cut++) {
      const got = scanner.fromChunks(split(text.slice(0, cut), [5]));
      expect(got, `cut at ${cut}`).toEqual(cut >= usageEnd ? { promptTokens: 19, completionTokens: 10 } : null);
    }
  });
});

describe("hostile answers", () => {
  // A deterministic generator, so a failure can be replayed.
  function lcg(seed: number): () => number {
    let s = seed >>> 0;
    return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
  }

  it("never traps on random bytes, mutated answers, deep nesting or unclosed strings", () => {
    const rand = lcg(7);
    const base = Buffer.from(streamAnswer(["x", "y"]));
    const alphabet = Buffer.from('{}[]":,\\ usage_prompt_tokens0123456789\n');
    for (let i = 0; i < 2000; i++) {
      const body = Buffer.from(base);
      for (let k = 0; k < 1 + Math.floor(rand() * 8); k++) body[Math.floor(rand() * body.length)] = alphabet[Math.floor(rand() * alphabet.length)];
      scanner.find(body);
      scanner.fromChunks([body.subarray(0, 100), body.subarray(100)]);
    }
    const noise = Buffer.alloc(5000);
    for (let i = 0; i < noise.length; i++) noise[i] = Math.floor(rand() * 256);
    expect(scanner.find(noise)).toBeNull();
    expect(scanner.find('{"usage":' + "[".repeat(10_000))).toBeNull();
    expect(scanner.find('{"usage":{"prompt_tokens":1,"x":"' + "\\".repeat(3001))).toBeNull();
    expect(scanner.find('{"usage":{"prompt_tokens":1,"x":{"y":[' + '{"usage":{'.repeat(500))).toBeNull();
    expect(scanner.find('"usage"')).toBeNull();
    expect(scanner.find("")).toBeNull();
  });
});

describe("which streams carry usage (the request side)", () => {
  let router: NativeRouter;

  beforeAll(async () => {
    router = await NativeRouter.load();
    router.setSnapshot(snapshot([pool("p", "llama", [endpoint("127.0.0.1:1")])]));
  });

  it.each([
    ['"stream":true,"stream_options":{"include_usage":true}', true],
    ['"stream":true,"stream_options":{"include_usage":false}', false],
    ['"stream":true,"stream_options":{"continuous_usage_stats":true}', false],
    ['"stream":true,"stream_options":null', false],
    ['"stream":true', false],
    ['"stream":false,"stream_options":{"include_usage":true}', false],
    ['"stream":true,"stream_options":{"include_usage":true,"include_usage":false}', false],
    ['"stream":true,"stream_options":"yes"', false],
  ])("%s: includeUsage %s", (fields, expected) => {
    expect(router.route(`{"model":"llama",${fields},"messages":[]}`)).toMatchObject({ includeUsage: expected });
  });
});

describe("a fake pod's real answers", () => {
  let fleet: Fleet;

  beforeAll(async () => {
    fleet = await startFleet([{ name: "pod", model: "llama", engineConfig: { speed: 20 } }]);
  });
  afterAll(() => fleet?.close());

  async function raw(body: object): Promise<{ chunks: Buffer[]; json: unknown }> {
    const res = await fetch(`${fleet.pod("pod").url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "llama", messages: [{ role: "user", content: "count to five" }], max_tokens: 6, ...body }),
    });
    const chunks: Buffer[] = [];
    for await (const c of res.body!) chunks.push(Buffer.from(c));
    const text = Buffer.concat(chunks).toString();
    return { chunks, json: text.startsWith("{") ? JSON.parse(text) : null };
  }

  it("reads the usage of a non-streamed answer and of a stream that asked for it", async () => {
    const plain = await raw({});
    const expected = (plain.json as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
    expect(scanner.fromChunks(plain.chunks)).toEqual({ promptTokens: expected.prompt_tokens, completionTokens: expected.completion_tokens });

    const streamed = await raw({ stream: true, stream_options: { include_usage: true } });
    const counts = { promptTokens: expected.prompt_tokens, completionTokens: 6 };
    expect(scanner.fromChunks(streamed.chunks)).toEqual(counts);
    // However the socket delivered it: one event per chunk, as a slow pod sends them.
    const events = Buffer.concat(streamed.chunks).toString().split(/(?<=\n\n)/);
    expect(events.length).toBeGreaterThan(6);
    expect(scanner.fromChunks(events)).toEqual(counts);

    expect(scanner.fromChunks((await raw({ stream: true })).chunks)).toBeNull();
  });
});

describe("a Responses answer", () => {
  // llama.cpp's shapes (tools/server, checked against a real llama-server): usage last in the response; a stream of typed events, no [DONE].
  const usage = { input_tokens: 54, output_tokens: 3, total_tokens: 57, input_tokens_details: { cached_tokens: 53 } };
  const response = (text: string) => ({ id: "resp_1", object: "response", status: "completed", model: "llama", output: [{ type: "message", content: [{ type: "output_text", text }] }], usage });
  const event = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
  const delta = event("response.output_text.delta", { type: "response.output_text.delta", delta: "h" });

  it("gives its token counts from input_tokens and output_tokens, whole or streamed", () => {
    expect(scanner.find(JSON.stringify(response("hi")))).toEqual({ promptTokens: 54, completionTokens: 3 });
    const completed = event("response.completed", { type: "response.completed", response: response("hi"), timings: { cache_n: 53 } });
    expect(scanner.fromChunks([delta, completed])).toEqual({ promptTokens: 54, completionTokens: 3 });
  });

  it("judges its stream by the last event's type, written first (llama.cpp, OpenAI) or last (vLLM)", () => {
    const ends = (chunks: string[]) => scanner.streamEnd(chunks, true);
    expect(ends([delta, event("response.completed", { type: "response.completed", response: response("hi") })])).toBe("whole");
    expect(ends([delta, event("response.completed", { response: response("hi"), sequence_number: 9, type: "response.completed" })])).toBe("whole");
    expect(ends([delta, event("response.incomplete", { type: "response.incomplete", response: response("hi") })])).toBe("whole");
    expect(ends([delta, event("response.failed", { response: response(""), type: "response.failed" })])).toBe("failed");
    expect(ends([delta, event("error", { type: "error", code: "server_error", message: "x" })])).toBe("failed");
    // Cut after a delta, or mid-event.
    expect(ends([delta, delta])).toBe("broken");
    expect(ends([delta, 'event: response.completed\ndata: {"type":"response.comp'])).toBe("broken");
    // A completed response longer than the tail, its type out of sight at the start: the only event that long, so whole.
    const big = event("response.completed", { type: "response.completed", response: response("x".repeat(TAIL_BYTES * 2)), timings: { cache_n: 1 } });
    expect(ends([delta, big])).toBe("whole");
    // A chat stream's [DONE] does not end a Responses stream, and the other way round.
    expect(ends([delta, "data: [DONE]\n\n"])).toBe("broken");
    expect(scanner.streamEnd([event("response.completed", { type: "response.completed", response: response("hi") })])).toBe("broken");
  });
});

