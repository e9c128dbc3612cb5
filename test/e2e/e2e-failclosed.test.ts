// Failure handling through a real Envoy (two workers) running the filter:
// misconfiguration and VM crashes fail closed, a lost aggregator never makes
// the filter route blind for long, dead pods cost clients nothing, and the
// parts of the request path Envoy owns (trailers, keep-alive) hold up.
import { execFileSync } from "node:child_process";
import http from "node:http";
import http2 from "node:http2";
import OpenAI from "openai";
import { parseDocument } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { renderEnvoyConfig, envoyParamsFromGatewayConfig } from "../../host/envoy/index.js";
import { startEnvoy } from "../../testing/launcher/envoy-process.js";
import { filterWasmPath, projectRoot } from "../../host/paths.js";
import { onEveryWorker, waitForWorkers } from "../helpers/connections.js";
import { startDecoy, startTestStack, waitFor, type TestStack } from "../helpers/stack.js";

const ask = { messages: [{ role: "user" as const, content: "Say hello" }], max_tokens: 4 };
const CHAT_BODY = JSON.stringify({ model: "llama-3.1-8b", ...ask });

function clientFor(stack: TestStack): OpenAI {
  return new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey: "x", maxRetries: 0 });
}

async function post(url: string, body: string, headers: Record<string, string> = {}) {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
  return { status: r.status, servedBy: r.headers.get("x-served-by"), json: await r.json().catch(() => null) };
}

/** A POST on an HTTP/2 session, optionally ending in trailers. */
function h2Post(
  session: http2.ClientHttp2Session,
  body: string,
  headers: Record<string, string> = {},
  trailers?: Record<string, string>,
): Promise<{ status: number; servedBy: string | undefined; body: string }> {
  return new Promise((resolve, reject) => {
    const req = session.request(
      { ":method": "POST", ":path": "/v1/chat/completions", "content-type": "application/json", ...headers },
      { waitForTrailers: trailers !== undefined },
    );
    if (trailers) req.on("wantTrailers", () => req.sendTrailers(trailers));
    let status = 0;
    let servedBy: string | undefined;
    let text = "";
    req.on("response", (h) => {
      status = Number(h[":status"]);
      servedBy = h["x-served-by"] as string | undefined;
    });
    req.setEncoding("utf8").on("data", (c: string) => (text += c));
    req.on("end", () => resolve({ status, servedBy, body: text }));
    req.on("error", reject);
    req.end(body);
  });
}

/** Sets a field of the Wasm HTTP filter's plugin config in a rendered bootstrap. */
function withHttpFilterPlugin(yaml: string, edit: (plugin: Record<string, unknown>) => void): string {
  const doc = parseDocument(yaml);
  const js = doc.toJS() as any;
  const filters = js.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters as any[];
  const wasm = filters.find((f) => f.name === "envoy.filters.http.wasm");
  edit(wasm.typed_config.config);
  return JSON.stringify(js);
}

describe("a misconfigured filter fails closed", () => {
  it("a mistyped root_id lets nothing through: Envoy rejects the filter or refuses every request", async () => {
    const stack = await startTestStack([{ name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }] }]);
    const decoy = await startDecoy();
    try {
      const params = envoyParamsFromGatewayConfig(stack.config, { wasmPath: filterWasmPath });
      const yaml = withHttpFilterPlugin(
        renderEnvoyConfig({ ...params, gatewayPort: 0, adminPort: 0, aggregatorPort: stack.aggregator.grpcPort }),
        (plugin) => { plugin.root_id = "llm_gatewy"; },
      );
      const started = await startEnvoy({ configYaml: yaml, concurrency: 2 }).catch((err: Error) => err);
      if (started instanceof Error) {
        expect(started.message).toMatch(/root_id 'llm_gatewy'|Unable to create Wasm HTTP filter|configure/i);
      } else {
        try {
          const url = `http://${started.listenerAddresses.llm_gateway}/v1/chat/completions`;
          for (let i = 0; i < 6; i++) {
            const r = await post(url, CHAT_BODY, {
              "x-gateway-destination-endpoint": decoy.address, "x-gateway-pool": "llama",
            });
            expect(r.status).toBe(503);
            expect(r.json.error.type).toBeTruthy();
          }
        } finally {
          await started.stop();
        }
      }
      expect(decoy.hits()).toBe(0);
    } finally {
      await decoy.close();
      await stack.close();
    }
  });

  it("an invalid filter setting is refused rather than defaulted", async () => {
    const stack = await startTestStack([{ name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }] }]);
    try {
      const params = envoyParamsFromGatewayConfig(stack.config, { wasmPath: filterWasmPath });
      const yaml = withHttpFilterPlugin(
        renderEnvoyConfig({ ...params, gatewayPort: 0, adminPort: 0, aggregatorPort: stack.aggregator.grpcPort }),
        (plugin) => {
          (plugin.configuration as { value: string }).value = '{"max_body_bytes":1024,"stale_view_polcy":"reject"}';
        },
      );
      const started = await startEnvoy({ configYaml: yaml, concurrency: 2 }).catch((err: Error) => err);
      if (!(started instanceof Error)) await started.stop();
      expect(started).toBeInstanceOf(Error);
      expect((started as Error).message).toMatch(/unknown setting 'stale_view_polcy'/);
    } finally {
      await stack.close();
    }
  });
});

describe("a crashed VM", () => {
  let stack: TestStack;
  let crashWasm: string;

  beforeAll(async () => {
    execFileSync(process.execPath, ["node_modules/assemblyscript/bin/asc.js", "test/fixtures/crash-filter.ts", "--target", "crashtest"], {
      cwd: projectRoot,
      stdio: "pipe",
    });
    crashWasm = `${projectRoot}/build/crash-filter.wasm`;
    stack = await startTestStack(
      [{ name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }, { name: "llama-b" }] }],
      {},
      { wasmPath: crashWasm },
    );
  }, 120_000);

  afterAll(async () => {
    await stack?.close();
  });

  it("fails requests closed while it is down and is reloaded, routing again from the surviving shared data", async () => {
    // One HTTP/2 connection stays on one worker, so every request below meets the VM that crashes.
    const session = http2.connect(stack.gatewayUrl);
    try {
      expect((await h2Post(session, CHAT_BODY)).status).toBe(200);
      const crashed = await h2Post(session, CHAT_BODY, { "x-crash-test": "1" });
      expect(crashed.status).toBe(503);
      expect(crashed.servedBy).toBeUndefined();

      // FAIL_RELOAD rebuilds the VM after a backoff; meanwhile its requests are refused, never passed unchecked.
      const statuses: number[] = [];
      await waitFor("the crashed VM to be reloaded and routing", async () => {
        const r = await h2Post(session, CHAT_BODY);
        statuses.push(r.status);
        if (r.status !== 200) expect(r.servedBy).toBeUndefined();
        return r.status === 200;
      }, 20_000);
      expect(statuses.slice(0, -1).every((s) => s === 503)).toBe(true);
      expect(statuses.at(-1)).toBe(200);
      const stats = await stack.envoy.stats("wasm");
      expect(stats["wasm.llm_gateway.vm_reload_success"]).toBeGreaterThan(0);
      // The reloaded VM routes from the snapshot that survived in shared data, and still answers bad input itself.
      expect((await h2Post(session, CHAT_BODY)).servedBy).toMatch(/^llama-[ab]$/);
      expect((await h2Post(session, "{")).status).toBe(400);
    } finally {
      session.close();
    }
  });
});

describe("losing the aggregator, then a pod", () => {
  let stack: TestStack;

  beforeAll(async () => {
    stack = await startTestStack(
      [{ name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }, { name: "llama-b" }, { name: "llama-c" }] }],
      { staleView: { maxAgeMs: 1500, policy: "failOpen" } },
    );
  });

  afterAll(async () => {
    await stack?.close();
  });

  it("after the view's age bound no request fails or lands on the dead pod", async () => {
    const client = clientFor(stack);
    await client.chat.completions.create({ model: "llama-3.1-8b", ...ask });
    await stack.aggregator.close();
    // llama-a dies; the last snapshot still calls it fresh.
    const dead = stack.fleet.pod("llama-a");
    await dead.close();
    // Past the age bound on both workers: each ages the view on its own tick.
    await onEveryWorker(stack, "the view past its age bound", async (c) => {
      const health = await c.get("/health");
      return health.status === 200 && health.json.status === "degraded";
    });

    const served: string[] = [];
    for (let i = 0; i < 30; i++) {
      const { response } = await client.chat.completions.create({ model: "llama-3.1-8b", ...ask }).withResponse();
      served.push(response.headers.get("x-served-by") ?? "");
    }
    expect(served.every((s) => s === "llama-b" || s === "llama-c")).toBe(true);
    // The filter hands its counters to Envoy on its next tick.
    await waitFor("30 blind routes counted", async () =>
      ((await stack.envoy.stats("llm_gateway"))["wasmcustom.llm_gateway.requests_routed_blind_total;pool=llama;model=llama-3.1-8b"] ?? 0) >= 30);
  });
});

describe("pods failing under traffic", () => {
  let stack: TestStack;

  beforeAll(async () => {
    stack = await startTestStack([
      { name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }, { name: "llama-b" }, { name: "llama-c" }] },
    ]);
  });

  afterAll(async () => {
    await stack?.close();
  });

  it("a pod killed mid-stream ends that stream with an error, not a hang, and costs later requests nothing", async () => {
    const client = clientFor(stack);
    const victim = stack.fleet.pod("llama-a");
    victim.engine.config.speed = 0.05; // slow enough that the stream is still running when the pod dies
    // Make llama-a the best choice: the others look busy.
    for (const name of ["llama-b", "llama-c"]) stack.fleet.pod(name).injectLoad({ requests: 20, promptTokens: 64, maxTokens: 50 });
    await waitFor("llama-b and llama-c to look busy", () =>
      stack.aggregator.current().pools[0].endpoints.filter((e) => e.waiting + e.running > 0).length >= 2);
    await waitForWorkers(stack);

    const { data: stream, response } = await client.chat.completions
      .create({ model: "llama-3.1-8b", messages: ask.messages, max_tokens: 400, stream: true })
      .withResponse();
    expect(response.headers.get("x-served-by")).toBe("llama-a");
    let chunks = 0;
    const outcome = (async () => {
      for await (const _ of stream) if (++chunks === 2) void victim.close();
    })();
    await expect(outcome).rejects.toThrow();
    expect(chunks).toBeGreaterThanOrEqual(2);

    const answers = await Promise.all(Array.from({ length: 20 }, () =>
      client.chat.completions.create({ model: "llama-3.1-8b", ...ask }).withResponse()));
    for (const a of answers) expect(a.response.headers.get("x-served-by")).toMatch(/^llama-[bc]$/);
  });
});

describe("the request path", () => {
  let stack: TestStack;

  beforeAll(async () => {
    stack = await startTestStack([
      { name: "llama", baseModel: "llama-3.1-8b", adapters: ["sql-lora"], pods: [{ name: "llama-a" }] },
    ]);
  });

  afterAll(async () => {
    await stack?.close();
  });

  it("validates and routes a body that ends in trailers (HTTP/2 cleartext)", async () => {
    const session = http2.connect(stack.gatewayUrl);
    try {
      const send = (body: string) => h2Post(session, body, {}, { "x-request-checksum": "none" });
      const ok = await send(CHAT_BODY);
      expect(ok.status).toBe(200);
      expect(ok.servedBy).toBe("llama-a");
      const bad = await send('{"model":"llama-3.1-8b"}');
      expect(bad.status).toBe(400);
      expect(JSON.parse(bad.body).error.param).toBe("messages");
    } finally {
      session.close();
    }
  });

  it("answers models.retrieve for a base model and an adapter, 404 for others", async () => {
    const client = clientFor(stack);
    const base = await client.models.retrieve("llama-3.1-8b");
    expect(base).toMatchObject({ id: "llama-3.1-8b", object: "model", root: "llama-3.1-8b", parent: null });
    const adapter = await client.models.retrieve("sql-lora");
    expect(adapter).toMatchObject({ id: "sql-lora", parent: "llama-3.1-8b" });
    const err = await client.models.retrieve("gpt-99").catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err.code).toBe("model_not_found");
  });

  it("reports its health", async () => {
    const r = await fetch(`${stack.gatewayUrl}/health`);
    expect(r.status).toBe(200);
    const body = await r.json();
    expect(body.status).toBe("ok");
    expect(body.snapshot_version).toBeGreaterThan(0);
    expect(body.view_age_ms).toBeLessThan(3_000);
  });

  it("keeps the keep-alive connection open after answering a complete bad body", async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const { hostname, port } = new URL(stack.gatewayUrl);
    const send = (body: string) => new Promise<{ status: number; socket: unknown; connection?: string }>((resolve, reject) => {
      const req = http.request({ host: hostname, port, method: "POST", path: "/v1/chat/completions", agent,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) } }, (res) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode!, socket: req.socket, connection: res.headers.connection }));
      });
      req.on("error", reject);
      req.end(body);
    });
    try {
      const first = await send('{"model":"llama-3.1-8b","messages":[');
      expect(first.status).toBe(400);
      expect(first.connection).not.toBe("close");
      const second = await send(CHAT_BODY);
      expect(second.status).toBe(200);
      expect(second.socket).toBe(first.socket);
    } finally {
      agent.destroy();
    }
  });
});
