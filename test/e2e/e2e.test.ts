// End to end through a real Envoy running build/filter.wasm, fed over gRPC by
// the aggregator, in front of real HTTP fake pods, with the official OpenAI
// client as the client.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitForWorkers } from "../helpers/connections.js";
import { startDecoy, startTestStack, waitFor, type TestStack } from "../helpers/stack.js";

const MAX_BODY = 256 * 1024;
let stack: TestStack;
let client: OpenAI;

beforeAll(async () => {
  stack = await startTestStack(
    [
      {
        name: "llama",
        baseModel: "llama-3.1-8b",
        adapters: ["sql-lora"],
        pods: [{ name: "llama-a" }, { name: "llama-b" }],
      },
      { name: "qwen", baseModel: "qwen3-32b", pods: [{ name: "qwen-a" }] },
    ],
    { maxBodyBytes: MAX_BODY },
  );
  client = new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey: "not-needed", maxRetries: 0 });
});

afterAll(async () => {
  await stack?.close();
});

const ask = { messages: [{ role: "user" as const, content: "Say hello" }], max_tokens: 8 };

async function chat(model: string, headers: Record<string, string> = {}) {
  const { data, response } = await client.chat.completions.create({ model, ...ask }, { headers }).withResponse();
  return { data, servedBy: response.headers.get("x-served-by") };
}

function post(path: string, body: string | Buffer): Promise<{ status: number; json: any }> {
  return fetch(`${stack.gatewayUrl}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body })
    .then(async (r) => ({ status: r.status, json: await r.json() }));
}

describe("OpenAI API through the gateway", () => {
  it("answers a chat completion, routed to a pod of the requested model", async () => {
    const { data, servedBy } = await chat("llama-3.1-8b");
    expect(data.object).toBe("chat.completion");
    expect(data.model).toBe("llama-3.1-8b");
    expect(data.choices[0].message.content?.length).toBeGreaterThan(0);
    expect(data.usage?.completion_tokens).toBe(8);
    expect(servedBy).toMatch(/^llama-[ab]$/);
    expect((await chat("qwen3-32b")).servedBy).toBe("qwen-a");
  });

  it("answers a legacy completion", async () => {
    const r = await client.completions.create({ model: "qwen3-32b", prompt: "Once upon a time", max_tokens: 4 });
    expect(r.object).toBe("text_completion");
    expect(r.choices[0].text.length).toBeGreaterThan(0);
  });

  it("streams a chat completion to the end", async () => {
    const stream = await client.chat.completions.create({ model: "llama-3.1-8b", ...ask, stream: true });
    let text = "";
    let finish: string | null = null;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      text += chunk.choices[0]?.delta?.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(chunks).toBeGreaterThanOrEqual(8);
    expect(text.trim().split(/\s+/).length).toBe(8);
    expect(finish).toBe("length");
  });

  it("routes a LoRA adapter name to its base model's pool", async () => {
    const { data, servedBy } = await chat("sql-lora");
    expect(data.model).toBe("sql-lora");
    expect(servedBy).toMatch(/^llama-[ab]$/);
  });

  it("lists the served models, adapters included", async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids.sort()).toEqual(["llama-3.1-8b", "qwen3-32b", "sql-lora"]);
  });
});

describe("bad input", () => {
  it("answers malformed JSON with 400 in OpenAI format", async () => {
    const r = await post("/v1/chat/completions", '{"model": "llama-3.1-8b", "messages": [');
    expect(r.status).toBe(400);
    expect(r.json.error.type).toBe("invalid_request_error");
    expect(r.json.error.message).toMatch(/not valid JSON/);
  });

  it("answers a body without model with 400", async () => {
    const r = await post("/v1/chat/completions", JSON.stringify({ messages: [] }));
    expect(r.status).toBe(400);
    expect(r.json.error.param).toBe("model");
  });

  it("answers an unknown model with 404 through the OpenAI client", async () => {
    const err = await client.chat.completions.create({ model: "gpt-99", ...ask }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err.status).toBe(404);
    expect(err.code).toBe("model_not_found");
  });

  it("answers a body over the limit with 413, whether announced or chunked", async () => {
    const big = JSON.stringify({ model: "llama-3.1-8b", messages: [{ role: "user", content: "x".repeat(MAX_BODY) }] });
    const announced = await post("/v1/chat/completions", big);
    expect(announced.status).toBe(413);
    expect(announced.json.error.code).toBe("request_too_large");
    // A streamed body has no content-length: the filter must count it as it buffers.
    const chunked = await fetch(`${stack.gatewayUrl}/v1/chat/completions`, {
      method: "POST",
      body: new Blob([big]).stream(),
      duplex: "half",
    } as RequestInit);
    expect(chunked.status).toBe(413);
  });

  it("keeps serving after bad input, on every worker", async () => {
    const bad = ["{", "[]", '{"model":1}', "\u0000", '{"model":"x","messages":[' + "[".repeat(5000)];
    await Promise.all(bad.flatMap((b) => Array.from({ length: 4 }, () => post("/v1/chat/completions", b))));
    const answers = await Promise.all(Array.from({ length: 8 }, () => chat("llama-3.1-8b")));
    for (const a of answers) expect(a.data.choices[0].message.content).toBeTruthy();
    const stats = await stack.envoy.stats("wasm");
    expect(stats["wasm.llm_gateway.vm_reload"] ?? 0).toBe(0);
  });

  it("reads the body as the pod does: escaped and duplicate keys, invalid UTF-8, a BOM, messages beside prompt", async () => {
    const send = async (body: Buffer) => {
      const r = await fetch(`${stack.gatewayUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
      return { status: r.status, servedBy: r.headers.get("x-served-by"), parsed: r.headers.get("x-fake-parsed-model"), json: await r.json() };
    };
    const msgs = '"messages":[{"role":"user","content":"hi"}],"max_tokens":2';
    // The second key is "model" once unescaped, and the last duplicate wins, as in Python.
    const smuggled = await send(Buffer.from(`{"model":"llama-3.1-8b","m\\u006fdel":"qwen3-32b",${msgs}}`));
    expect(smuggled.status).toBe(200);
    expect(smuggled.servedBy).toBe("qwen-a");
    expect(smuggled.parsed).toBe("qwen3-32b");
    // "llama" with an overlong encoding of "l" (C1 AC): never routed as the decoded name.
    const overlong = await send(Buffer.concat([Buffer.from('{"model":"'), Buffer.from([0xc1, 0xac]), Buffer.from(`lama-3.1-8b",${msgs}}`)]));
    expect(overlong.status).toBe(400);
    expect(overlong.json.error.message).toMatch(/not valid UTF-8/);
    expect(overlong.servedBy).toBeNull();
    const bom = await send(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(`{"model":"llama-3.1-8b",${msgs}}`)]));
    expect(bom.status).toBe(200);
    expect(bom.parsed).toBe("llama-3.1-8b");
    const both = await send(Buffer.from(`{"model":"llama-3.1-8b","prompt":"x",${msgs}}`));
    expect(both.status).toBe(200);
  });

  it("answers unknown paths with 404 in OpenAI format", async () => {
    const r = await fetch(`${stack.gatewayUrl}/admin`);
    expect(r.status).toBe(404);
    expect((await r.json()).error.code).toBe("unknown_url");
  });
});

describe("security", () => {
  it("never lets a client choose the upstream with x-gateway-* headers", async () => {
    const decoy = await startDecoy();
    const target = decoy.address;
    try {
      for (let i = 0; i < 5; i++) {
        const { servedBy } = await chat("llama-3.1-8b", {
          "x-gateway-destination-endpoint": target,
          "X-Gateway-Destination-Endpoint-Extra": target,
        });
        expect(servedBy).toMatch(/^llama-[ab]$/);
      }
      expect(decoy.hits()).toBe(0);
    } finally {
      await decoy.close();
    }
  });
});

describe("load-aware routing", () => {
  it("moves traffic away from a pod whose queue grows", async () => {
    const busy = stack.fleet.pod("llama-a");
    // More than max_num_seqs long requests, on a slowed pod: a real backlog.
    busy.engine.config.speed = 0.05;
    busy.injectLoad({ requests: 300, promptTokens: 64, maxTokens: 2000 });
    await waitFor("the aggregator to report llama-a's queue", () => {
      const ep = stack.aggregator.current().pools[0].endpoints.find((e) => e.address === busy.address);
      return (ep?.waiting ?? 0) > 0;
    });
    await waitForWorkers(stack);
    const served = [];
    for (let i = 0; i < 12; i++) served.push((await chat("llama-3.1-8b")).servedBy);
    expect(served).toEqual(Array(12).fill("llama-b"));
  });
});
