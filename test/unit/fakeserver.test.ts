import http, { type IncomingHttpHeaders } from "node:http";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type Fleet, parseFleetFile, pyFloat, startFleet } from "../../testing/fakeserver/index.js";

const MODEL = "llama-3.1-8b";

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Minimal Prometheus text parser: samples plus the declared TYPE of each family. */
function parseProm(text: string): { samples: Sample[]; types: Map<string, string> } {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) {
      types.set(type[1], type[2]);
      continue;
    }
    if (line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`unparseable metrics line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return { samples, types };
}

function only(samples: Sample[], name: string): Sample {
  const found = samples.filter((s) => s.name === name);
  expect(found, name).toHaveLength(1);
  return found[0];
}

async function scrape(url: string): Promise<{ samples: Sample[]; types: Map<string, string> }> {
  const res = await fetch(`${url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("text/plain");
  return parseProm(await res.text());
}

describe("fake model servers", () => {
  let fleet: Fleet;
  const client = (pod: string): OpenAI =>
    new OpenAI({ baseURL: `${fleet.pod(pod).url}/v1`, apiKey: "unused", maxRetries: 0 });

  beforeAll(async () => {
    fleet = await startFleet([
      // Fast engines keep real-time tests short: a small request takes a few ms.
      { name: "fast", port: 0, model: MODEL, adapters: ["sql-lora", "chat-lora"], engineConfig: { speed: 20 } },
      // Frozen engines: a step lasts minutes, so state is stable while we scrape it.
      { name: "frozen-vllm", model: MODEL, adapters: ["sql-lora", "chat-lora"], engineConfig: { speed: 1e-4, maxLoras: 1 } },
      { name: "frozen-sglang", model: "qwen3-32b", metricsFormat: "sglang", engineConfig: { speed: 1e-4 } },
      { name: "frozen-tgi", model: "qwen3-32b", metricsFormat: "tgi", engineConfig: { speed: 1e-4 } },
      { name: "frozen-abort", model: "qwen3-32b", engineConfig: { speed: 1e-4 } },
    ]);
  });

  afterAll(async () => {
    await fleet?.close();
  });

  it("binds every pod to its own 127.0.0.1 port", () => {
    const addresses = fleet.pods.map((p) => p.address);
    expect(new Set(addresses).size).toBe(5);
    for (const p of fleet.pods) {
      expect(p.address).toMatch(/^127\.0\.0\.1:\d+$/);
      expect(p.url).toBe(`http://${p.address}`);
    }
    expect(fleet.pod("frozen-tgi").metricsFormat).toBe("tgi");
    expect(() => fleet.pod("nope")).toThrow();
  });

  it("serves a non-streaming chat completion", async () => {
    const { data, response } = await client("fast")
      .chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hello there" }], max_tokens: 5 })
      .withResponse();
    expect(response.headers.get("x-served-by")).toBe("fast");
    expect(data.object).toBe("chat.completion");
    expect(data.model).toBe(MODEL);
    expect(data.id).toMatch(/^chatcmpl-/);
    expect(data.choices[0].message.role).toBe("assistant");
    expect(data.choices[0].message.content?.split(" ")).toHaveLength(5);
    expect(data.choices[0].finish_reason).toBe("length");
    expect(data.usage).toMatchObject({ completion_tokens: 5 });
    expect(data.usage!.total_tokens).toBe(data.usage!.prompt_tokens + 5);
  });

  it("streams a chat completion that ends with [DONE]", async () => {
    const stream = await client("fast").chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Stream please" }],
      max_tokens: 8,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    const finishes: (string | null)[] = [];
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      expect(chunk.object).toBe("chat.completion.chunk");
      for (const c of chunk.choices) {
        text += c.delta.content ?? "";
        finishes.push(c.finish_reason);
      }
      usage = chunk.usage ?? usage;
    }
    expect(text.split(" ")).toHaveLength(8);
    expect(finishes.at(-1)).toBe("length");
    expect(finishes.filter((f) => f !== null)).toHaveLength(1);
    expect(usage?.completion_tokens).toBe(8);
  });

  it("serves completions, streaming and not, including for an adapter", async () => {
    const c = client("fast");
    const plain = await c.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 4 });
    expect(plain.object).toBe("text_completion");
    expect(plain.choices[0].text.split(" ")).toHaveLength(4);
    expect(plain.usage?.completion_tokens).toBe(4);

    const stream = await c.completions.create({ model: "sql-lora", prompt: "SELECT", max_tokens: 6, stream: true });
    let text = "";
    let last: string | null = null;
    for await (const chunk of stream) {
      expect(chunk.model).toBe("sql-lora");
      text += chunk.choices[0].text;
      last = chunk.choices[0].finish_reason;
    }
    expect(text.startsWith(plain.choices[0].text)).toBe(true);
    expect(text.split(" ")).toHaveLength(6);
    expect(last).toBe("length");
    expect(fleet.pod("fast").engine.metrics().residentAdapters).toContain("sql-lora");
  });

  it("defaults max_tokens to 16", async () => {
    const res = await client("fast").completions.create({ model: MODEL, prompt: "hi" });
    expect(res.usage?.completion_tokens).toBe(16);
  });

  it("lists the base model and its adapters", async () => {
    const models = await client("fast").models.list();
    const byId = new Map(models.data.map((m) => [m.id, m as unknown as Record<string, unknown>]));
    expect([...byId.keys()]).toEqual([MODEL, "sql-lora", "chat-lora"]);
    expect(byId.get("sql-lora")?.parent).toBe(MODEL);
  });

  it("answers 404 model_not_found for an unknown model", async () => {
    const err = await client("fast")
      .chat.completions.create({ model: "gpt-nope", messages: [{ role: "user", content: "x" }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    const e = err as InstanceType<typeof OpenAI.NotFoundError>;
    expect(e.status).toBe(404);
    expect(e.code).toBe("model_not_found");
    expect(e.param).toBe("model");
    expect(e.type).toBe("invalid_request_error");
  });

  it("answers 400 in OpenAI error format for bad JSON and bad fields", async () => {
    const url = `${fleet.pod("fast").url}/v1/chat/completions`;
    const bad = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: "{nope" });
    expect(bad.status).toBe(400);
    expect(bad.headers.get("x-served-by")).toBe("fast");
    const body = (await bad.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({ type: "invalid_request_error", code: "invalid_json", param: null });
    expect(typeof body.error.message).toBe("string");

    const noMessages = await fetch(url, { method: "POST", body: JSON.stringify({ model: MODEL }) });
    expect(noMessages.status).toBe(400);
    expect(((await noMessages.json()) as { error: { param: string } }).error.param).toBe("messages");

    const tooLong = await fetch(url, {
      method: "POST",
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 1_000_000 }),
    });
    expect(tooLong.status).toBe(400);
    expect(((await tooLong.json()) as { error: { code: string } }).error.code).toBe("context_length_exceeded");
  });

  it("reads bodies as vLLM does and reports the model it read in x-fake-parsed-model", async () => {
    const url = `${fleet.pod("fast").url}/v1/chat/completions`;
    const post = (body: Buffer | string) => fetch(url, { method: "POST", body });
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    const ask = '"messages":[{"role":"user","content":"hi"}],"max_tokens":1';

    const lastWins = await post(Buffer.concat([bom, Buffer.from(`{"model":"gpt-nope","m\\u006fdel":"${MODEL}",${ask}}`)]));
    expect(lastWins.status).toBe(200);
    expect(lastWins.headers.get("x-fake-parsed-model")).toBe(MODEL);
    await lastWins.text();

    const streamed = await post(`{"model":"sql-lora","stream":true,${ask}}`);
    expect(streamed.headers.get("content-type")).toBe("text/event-stream");
    expect(streamed.headers.get("x-fake-parsed-model")).toBe("sql-lora");
    expect(await streamed.text()).toContain("[DONE]");

    const unknown = await post(`{"model":"a/b \u00fc",${ask}}`);
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get("x-fake-parsed-model")).toBe("a%2Fb%20%C3%BC");
    await unknown.text();

    // No header can carry a lone surrogate; the pod still answers.
    const lone = await post(`{"model":"\\ud800",${ask}}`);
    expect(lone.status).toBe(404);
    expect(lone.headers.get("x-fake-parsed-model")).toBeNull();
    await lone.text();

    for (const [body, message] of [
      [Buffer.from([...Buffer.from('{"model":"'), 0xed, 0xa0, 0x80, ...Buffer.from(`",${ask}}`)]), "Request body is not valid UTF-8"],
      [Buffer.concat([bom, bom, Buffer.from(`{"model":"${MODEL}",${ask}}`)]), "Request body is not valid JSON"],
    ] as const) {
      const r = await post(body);
      expect(r.status).toBe(400);
      expect(r.headers.get("x-fake-parsed-model")).toBeNull();
      expect(await r.json()).toEqual({ error: { message, type: "invalid_request_error", param: null, code: "invalid_json" } });
    }
  });

  it("answers /health, and 404/405 elsewhere, always with x-served-by", async () => {
    const base = fleet.pod("frozen-tgi").url;
    const health = await fetch(`${base}/health`);
    expect(health.status).toBe(200);
    expect(health.headers.get("x-served-by")).toBe("frozen-tgi");
    const missing = await fetch(`${base}/nope`);
    expect(missing.status).toBe(404);
    expect(missing.headers.get("x-served-by")).toBe("frozen-tgi");
    expect((await fetch(`${base}/v1/models`, { method: "DELETE" })).status).toBe(405);
    // Admin hooks are off unless the fleet enables them.
    expect((await fetch(`${base}/admin/state`)).status).toBe(404);
  });

  it("aborts the engine request when a streaming client goes away", async () => {
    const pod = fleet.pod("frozen-abort");
    const before = pod.engine.metrics().counters.aborted;
    const ctrl = new AbortController();
    const pending = fetch(`${pod.url}/v1/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "qwen3-32b", prompt: "never finishes", stream: true }),
      signal: ctrl.signal,
    }).catch((e: unknown) => e);
    await vi.waitFor(() => expect(pod.engine.metrics().numRunning + pod.engine.metrics().numWaiting).toBe(1));
    ctrl.abort();
    await pending;
    await vi.waitFor(() => expect(pod.engine.metrics().counters.aborted).toBe(before + 1));
    expect(pod.engine.metrics().numRunning + pod.engine.metrics().numWaiting).toBe(0);
  });

  it("exports true engine state in vLLM format", async () => {
    const pod = fleet.pod("frozen-vllm");
    // Two adapters, one slot: chat-lora must wait behind sql-lora. Plus queued base-model load.
    pod.driver.submit({ id: "a1", prompt: "query one", maxTokens: 10, adapter: "sql-lora" });
    pod.driver.submit({ id: "a2", prompt: "query two", maxTokens: 10, adapter: "chat-lora" });
    pod.injectLoad({ requests: 300, promptTokens: 64, maxTokens: 16 });
    await vi.waitFor(() => expect(pod.engine.metrics().numRunning).toBeGreaterThan(0));

    const { samples, types } = await scrape(pod.url);
    const m = pod.engine.metrics();
    const l = { engine: "0", model_name: MODEL };
    expect(only(samples, "vllm:num_requests_running")).toEqual({ name: "vllm:num_requests_running", labels: l, value: m.numRunning });
    expect(only(samples, "vllm:num_requests_waiting")).toMatchObject({ labels: l, value: m.numWaiting });
    expect(m.numWaiting).toBeGreaterThan(200);
    expect(only(samples, "vllm:kv_cache_usage_perc").value).toBeCloseTo(m.kvUsage, 12);
    expect(m.kvUsage).toBeGreaterThan(0);

    const lora = samples.filter((s) => s.name === "vllm:lora_requests_info");
    const newest = lora.reduce((a, b) => (b.value > a.value ? b : a));
    // As vLLM 0.13 lists them: every adapter with a request in flight in both labels, sql-lora running, chat-lora queued.
    expect(newest.labels).toEqual({ max_lora: "1", running_lora_adapters: "sql-lora,chat-lora", waiting_lora_adapters: "sql-lora,chat-lora" });
    expect(Math.abs(newest.value - Date.now() / 1000)).toBeLessThan(60);

    expect(only(samples, "vllm:cache_config_info").labels).toMatchObject({
      block_size: "16",
      num_gpu_blocks: String(m.numGpuBlocks),
    });
    expect(only(samples, "vllm:prefix_cache_queries_total")).toMatchObject({ labels: l, value: m.counters.prefixCacheQueries });
    expect(only(samples, "vllm:prefix_cache_hits_total").value).toBe(m.counters.prefixCacheHits);
    expect(types.get("vllm:prefix_cache_queries_total")).toBe("counter");
    expect(types.get("vllm:time_to_first_token_seconds")).toBe("histogram");
    const buckets = samples.filter((s) => s.name === "vllm:time_to_first_token_seconds_bucket");
    expect(buckets.at(-1)?.labels).toEqual({ ...l, le: "+Inf" });
    expect(buckets.map((b) => b.labels.le)).toContain("0.1");
    expect(only(samples, "vllm:time_to_first_token_seconds_count").value).toBe(m.ttft.count);
  });

  it("reports TTFT observations from the fast pod's histogram", async () => {
    const pod = fleet.pod("fast");
    const { samples } = await scrape(pod.url);
    const count = only(samples, "vllm:time_to_first_token_seconds_count").value;
    expect(count).toBe(pod.engine.metrics().ttft.count);
    expect(count).toBeGreaterThanOrEqual(5);
    const inf = samples.find((s) => s.name === "vllm:time_to_first_token_seconds_bucket" && s.labels.le === "+Inf");
    expect(inf?.value).toBe(count);
    expect(only(samples, "vllm:time_to_first_token_seconds_sum").value).toBeGreaterThan(0);
  });

  it("exports SGLang and TGI dialects", async () => {
    const sg = fleet.pod("frozen-sglang");
    sg.injectLoad({ requests: 40, promptTokens: 100, maxTokens: 8 });
    const tgi = fleet.pod("frozen-tgi");
    tgi.injectLoad({ requests: 40, promptTokens: 100, maxTokens: 8 });
    await vi.waitFor(() => expect(sg.engine.metrics().numRunning * tgi.engine.metrics().numRunning).toBeGreaterThan(0));

    const s = (await scrape(sg.url)).samples;
    const sm = sg.engine.metrics();
    const l = { model_name: "qwen3-32b", dp_rank: "0" };
    expect(only(s, "sglang:num_running_reqs")).toMatchObject({ labels: l, value: sm.numRunning });
    expect(only(s, "sglang:num_queue_reqs").value).toBe(sm.numWaiting);
    expect(only(s, "sglang:token_usage").value).toBeCloseTo(sm.kvUsage, 12);
    expect(only(s, "sglang:cache_hit_rate").value).toBe(0);
    expect(only(s, "sglang:page_size").value).toBe(16);
    expect(only(s, "sglang:num_pages").value).toBe(sm.numGpuBlocks);

    const t = (await scrape(tgi.url)).samples;
    const tm = tgi.engine.metrics();
    expect(only(t, "tgi_queue_size")).toEqual({ name: "tgi_queue_size", labels: {}, value: tm.numWaiting });
    expect(only(t, "tgi_batch_current_size").value).toBe(tm.numRunning);
    expect(only(t, "tgi_batch_current_max_tokens").value).toBe(tm.batchMaxTokens);
    expect(tm.batchMaxTokens).toBe(tm.numRunning * (100 + 8));
    expect(only(t, "tgi_batch_max_total_tokens").value).toBe(tm.numGpuBlocks * tm.blockSize);
  });
});

describe("preloaded adapters", () => {
  it("are loaded at start, yet an idle pod lists none, as vLLM lists only adapters with requests in flight", async () => {
    const adapters = ["sql-lora", "chat-lora"];
    const fleet = await startFleet([
      { name: "warm", model: MODEL, adapters, preloadAdapters: ["sql-lora"], engineConfig: { speed: 20 } },
      { name: "cold", model: MODEL, adapters, engineConfig: { speed: 20 } },
    ]);
    try {
      const lora = async (pod: string) => {
        const { samples } = await scrape(fleet.pod(pod).url);
        const newest = samples.filter((s) => s.name === "vllm:lora_requests_info").reduce((a, b) => (b.value > a.value ? b : a));
        return {
          running: only(samples, "vllm:num_requests_running").value,
          waiting: only(samples, "vllm:num_requests_waiting").value,
          labels: newest.labels,
        };
      };
      const idle = { running: 0, waiting: 0, labels: { max_lora: "4", running_lora_adapters: "", waiting_lora_adapters: "" } };
      expect(fleet.pod("warm").engine.metrics().residentAdapters).toEqual(["sql-lora"]);
      expect(await lora("warm")).toEqual(idle);
      expect(await lora("cold")).toEqual(idle);
      // Served without loading it (only chat-lora loads), and idle again lists nothing, though both stay resident.
      const client = new OpenAI({ baseURL: `${fleet.pod("warm").url}/v1`, apiKey: "unused", maxRetries: 0 });
      for (const model of ["sql-lora", "chat-lora"]) await client.completions.create({ model, prompt: "SELECT", max_tokens: 2 });
      const m = fleet.pod("warm").engine.metrics();
      expect(m.counters.loraLoads).toBe(1);
      expect(m.numRunning + m.numWaiting).toBe(0);
      expect(m.residentAdapters.sort()).toEqual(["chat-lora", "sql-lora"]);
      expect(await lora("warm")).toEqual(idle);
    } finally {
      await fleet.close();
    }
  });

  it("must be among the pod's adapters", async () => {
    await expect(startFleet([{ name: "p", model: MODEL, adapters: ["sql-lora"], preloadAdapters: ["chat-lora"] }])).rejects.toThrow(
      /preloads chat-lora, which is not among its adapters/,
    );
  });
});

describe("admin hooks", () => {
  it("queues load and changes speed over HTTP when enabled", async () => {
    const fleet = await startFleet([{ name: "ops", model: MODEL, engineConfig: { speed: 1e-4 } }], { admin: true });
    try {
      const pod = fleet.pod("ops");
      const res = await fetch(`${pod.url}/admin/load`, {
        method: "POST",
        body: JSON.stringify({ requests: 3, promptTokens: 32, maxTokens: 4, speed: 0.5 }),
      });
      expect(res.status).toBe(200);
      expect(pod.engine.config.speed).toBe(0.5);
      expect(pod.engine.metrics().counters.submitted).toBe(3);
      const state = (await (await fetch(`${pod.url}/admin/state`)).json()) as { counters: { submitted: number } };
      expect(state.counters.submitted).toBe(3);
      const bad = await fetch(`${pod.url}/admin/load`, { method: "POST", body: JSON.stringify({ requests: -1 }) });
      expect(bad.status).toBe(400);
    } finally {
      await fleet.close();
    }
  });
});

/** A raw exchange, watched as it goes: what arrived so far, and whether the response ended complete. */
interface Exchange {
  status?: number;
  headers: IncomingHttpHeaders;
  body: string;
  /** The response ended with all its bytes (false while it runs, or when its connection was cut). */
  complete: boolean;
  /** No response at all: the connection failed first. */
  failed: boolean;
  /** Settles when the exchange is over, however it ended. */
  done: Promise<void>;
}

function post(base: string, path: string, body: object): Exchange {
  const x: Exchange = { headers: {}, body: "", complete: false, failed: false, done: Promise.resolve() };
  x.done = new Promise<void>((resolve) => {
    const req = http.request(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json" }, agent: false }, (res) => {
      x.status = res.statusCode;
      x.headers = res.headers;
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (x.body += chunk));
      res.on("error", () => {}); // a cut response: `complete` says so
      res.on("close", () => {
        x.complete = res.complete;
        resolve();
      });
    });
    req.on("error", () => {
      if (x.status === undefined) x.failed = true;
      resolve();
    });
    req.end(JSON.stringify(body));
  });
  return x;
}

const events = (body: string) => body.match(/^data: /gm)?.length ?? 0;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("fault modes", () => {
  let fleet: Fleet;
  const chat = (maxTokens: number, stream: boolean) => ({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: maxTokens, stream });
  const busy = (name: string) => fleet.pod(name).engine.metrics().numRunning + fleet.pod(name).engine.metrics().numWaiting;

  beforeAll(async () => {
    // Speed 1: about 10 ms per token, so a stream of 50 tokens is still running when it is cut.
    fleet = await startFleet([{ name: "faulty", model: MODEL }], { admin: true });
  });

  afterAll(async () => {
    await fleet?.close();
  });

  it("switches over HTTP as on the fleet object, and refuses an unknown mode", async () => {
    const pod = fleet.pod("faulty");
    const set = (mode: unknown) => fetch(`${pod.url}/admin/fault`, { method: "POST", body: JSON.stringify({ mode }) });
    const on = await set("stall-stream");
    expect(on.status).toBe(200);
    expect(await on.json()).toEqual({ mode: "stall-stream" });
    expect(pod.fault).toBe("stall-stream");
    expect((await set("crash")).status).toBe(400);
    expect(pod.fault).toBe("stall-stream");
    expect(await (await set(null)).json()).toEqual({ mode: null });
    expect(pod.fault).toBeNull();
  });

  it("hang: reads a completion and sends nothing while /metrics looks idle; clearing it answers held and new requests", async () => {
    const pod = fleet.pod("faulty");
    const submitted = pod.engine.metrics().counters.submitted;
    pod.setFault("hang");
    const held = [post(pod.url, "/v1/chat/completions", chat(4, false)), post(pod.url, "/v1/completions", { model: MODEL, prompt: "x", max_tokens: 4, stream: true })];
    await sleep(300);
    for (const x of held) expect(x.status).toBeUndefined();
    const { samples } = await scrape(pod.url);
    expect(only(samples, "vllm:num_requests_running").value).toBe(0);
    expect(only(samples, "vllm:num_requests_waiting").value).toBe(0);
    expect(pod.engine.metrics().counters.submitted).toBe(submitted);

    pod.setFault(null);
    await Promise.all(held.map((x) => x.done));
    expect(held.map((x) => [x.status, x.complete])).toEqual([[200, true], [200, true]]);
    expect(JSON.parse(held[0].body).usage.completion_tokens).toBe(4);
    expect(held[1].body).toContain("data: [DONE]");
    const next = post(pod.url, "/v1/chat/completions", chat(2, false));
    await next.done;
    expect([next.status, next.complete]).toEqual([200, true]);
  });

  it("hang: stopping the server releases the connections it holds", async () => {
    const own = await startFleet([{ name: "hung", model: MODEL }]);
    const pod = own.pod("hung");
    pod.setFault("hang");
    const x = post(pod.url, "/v1/chat/completions", chat(4, false));
    await sleep(100);
    const started = performance.now();
    await own.close();
    await x.done;
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(x.failed).toBe(true);
  });

  it("break-streams: a stream gets a 200 and two events, then its connection goes, without [DONE]", async () => {
    const pod = fleet.pod("faulty");
    const aborted = pod.engine.metrics().counters.aborted;
    pod.setFault("break-streams");
    try {
      const x = post(pod.url, "/v1/chat/completions", chat(50, true));
      await x.done;
      expect(x.status).toBe(200);
      expect(x.headers["content-type"]).toBe("text/event-stream");
      expect(x.complete).toBe(false);
      expect(events(x.body)).toBe(2);
      expect(x.body).not.toContain("[DONE]");
      // The cut stream's engine request is aborted, not left running.
      await vi.waitFor(() => expect(pod.engine.metrics().counters.aborted).toBe(aborted + 1));
      expect(busy("faulty")).toBe(0);

      // Shorter than the break: the finish event is the second one.
      const short = post(pod.url, "/v1/completions", { model: MODEL, prompt: "x", max_tokens: 1, stream: true });
      await short.done;
      expect([short.status, short.complete, events(short.body)]).toEqual([200, false, 2]);
    } finally {
      pod.setFault(null);
    }
  });

  it("break-streams: a plain answer gets a 200 with its content-length, then only part of the body", async () => {
    const pod = fleet.pod("faulty");
    pod.setFault("break-streams");
    try {
      const x = post(pod.url, "/v1/chat/completions", chat(8, false));
      await x.done;
      expect(x.status).toBe(200);
      const length = Number(x.headers["content-length"]);
      expect(length).toBeGreaterThan(0);
      expect(x.complete).toBe(false);
      expect(Buffer.byteLength(x.body)).toBeGreaterThan(0);
      expect(Buffer.byteLength(x.body)).toBeLessThan(length);
    } finally {
      pod.setFault(null);
    }
  });

  it("stall-stream: a stream sends its first event and then nothing until cleared; plain answers go through", async () => {
    const pod = fleet.pod("faulty");
    pod.setFault("stall-stream");
    const x = post(pod.url, "/v1/chat/completions", chat(5, true));
    await vi.waitFor(() => expect(events(x.body)).toBe(1));
    const plain = post(pod.url, "/v1/chat/completions", chat(3, false));
    await plain.done;
    expect([plain.status, plain.complete]).toEqual([200, true]);
    // The engine finishes the stream in ~60 ms; the pod still holds it.
    await sleep(300);
    expect(busy("faulty")).toBe(0);
    expect(events(x.body)).toBe(1);
    expect(x.complete).toBe(false);

    pod.setFault(null);
    await x.done;
    expect(x.complete).toBe(true);
    // 5 tokens, the finish event and [DONE].
    expect(events(x.body)).toBe(7);
    expect(x.body.trimEnd().endsWith("data: [DONE]")).toBe(true);
  });
});

describe("fleet config", () => {
  it("parses a YAML fleet file with defaults", () => {
    const specs = parseFleetFile(`
pods:
  - name: h100-a
    model: ${MODEL}
    adapters: [sql-lora]
    engineConfig: { speed: 1.0, numGpuBlocks: 4096 }
  - name: a10g-a
    model: ${MODEL}
    port: 8001
    metricsFormat: sglang
    engineConfig: { speed: 0.35 }
`);
    expect(specs).toEqual([
      {
        name: "h100-a",
        port: 0,
        model: MODEL,
        adapters: ["sql-lora"],
        metricsFormat: "vllm",
        engineConfig: { speed: 1, numGpuBlocks: 4096 },
      },
      { name: "a10g-a", port: 8001, model: MODEL, adapters: [], metricsFormat: "sglang", engineConfig: { speed: 0.35 } },
    ]);
  });

  it("rejects duplicate names and unknown engine fields", () => {
    expect(() => parseFleetFile(`[{name: a, model: m}, {name: a, model: m}]`)).toThrow(/duplicate/);
    expect(() => parseFleetFile(`[{name: a, model: m, engineConfig: {sped: 2}}]`)).toThrow();
  });

  it("formats numbers like prometheus_client", () => {
    expect(pyFloat(3)).toBe("3.0");
    expect(pyFloat(0.41)).toBe("0.41");
    expect(pyFloat(1738217335.8407154)).toBe("1.7382173358407154e+09");
    expect(pyFloat(8192000)).toBe("8.192e+06");
    expect(pyFloat(Infinity)).toBe("+Inf");
  });
});
