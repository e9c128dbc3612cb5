// What Envoy itself guarantees around the filter (a real Envoy with two
// workers, the real aggregator serving the pools over ADS, plain HTTP servers
// as pods that count what reaches them): only known pods are ever reached,
// the route table answers everything else in OpenAI error format, paths are
// normalised first, failed attempts are retried on the filter's fallbacks and
// failing pods are ejected.
import http from "node:http";
import net, { type AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { renderEnvoyConfig, envoyParamsFromGatewayConfig } from "../../host/envoy/index.js";
import { startEnvoy } from "../../testing/launcher/envoy-process.js";
import { filterWasmPath } from "../../host/paths.js";
import { waitForWorkers } from "../helpers/connections.js";
import { startTestStack, waitFor, type TestStack } from "../helpers/stack.js";

const MAX_BODY = 64 * 1024;
// per_connection_buffer_limit_bytes and the buffer filter's limit (host/envoy/config.ts BUFFER_SLACK_BYTES).
const BUFFER_LIMIT = MAX_BODY + 64 * 1024;

/** A model server stand-in: vLLM metrics we set, and every other request counted by path. */
interface PlainPod {
  name: string;
  address: string;
  /** "METHOD path" of every request but the aggregator's /metrics scrapes. */
  requests: string[];
  /** What a completion gets. */
  status: number;
  waiting: number;
  close(): Promise<void>;
}

async function startPlainPod(name: string, opts: { status?: number; waiting?: number } = {}): Promise<PlainPod> {
  const server = http.createServer((req, res) => {
    if (req.url === "/metrics") {
      res.end(
        `vllm:num_requests_waiting{engine="0",model_name="m"} ${pod.waiting}\n` +
          `vllm:num_requests_running{engine="0",model_name="m"} 0\n` +
          `vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0\n`,
      );
      return;
    }
    pod.requests.push(`${req.method} ${req.url}`);
    let body = "";
    req.setEncoding("utf8").on("data", (c: string) => (body += c));
    req.on("end", () => {
      if (pod.status !== 200) {
        res.writeHead(pod.status, { "content-type": "application/json", "x-served-by": name });
        res.end(JSON.stringify({ error: { message: "engine failure", type: "server_error", param: null, code: null } }));
        return;
      }
      const stream = /"stream"\s*:\s*true/.test(body);
      const message = { role: "assistant", content: `hello from ${name}` };
      if (stream) {
        res.writeHead(200, { "content-type": "text/event-stream", "x-served-by": name });
        res.write(`data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: message }] })}\n\n`);
        res.end("data: [DONE]\n\n");
      } else {
        res.writeHead(200, { "content-type": "application/json", "x-served-by": name });
        res.end(JSON.stringify({ object: "chat.completion", choices: [{ index: 0, message, finish_reason: "stop" }] }));
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const pod: PlainPod = {
    name,
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests: [],
    status: opts.status ?? 200,
    waiting: opts.waiting ?? 0,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
  return pod;
}

/** A loopback port with nothing listening on it. */
async function closedPort(): Promise<string> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return `127.0.0.1:${port}`;
}

interface Reply {
  status: number;
  headers: Record<string, string>;
  body: string;
  json: any;
}

async function send(base: string, method: string, path: string, opts: { body?: string; headers?: Record<string, string> } = {}): Promise<Reply> {
  const r = await fetch(`${base}${path}`, {
    method,
    headers: { "content-type": "application/json", ...opts.headers },
    body: opts.body,
    redirect: "manual",
  });
  const body = await r.text();
  let json: any = null;
  try {
    json = JSON.parse(body);
  } catch {
    // not JSON; the assertions say so
  }
  return { status: r.status, headers: Object.fromEntries(r.headers), body, json };
}

/** An OpenAI error body with exactly the four fields, and its content type. */
function expectOpenAIError(r: Reply, status: number, code: string): void {
  expect(r.status, r.body).toBe(status);
  expect(r.headers["content-type"]).toBe("application/json");
  expect(Object.keys(r.json.error).sort()).toEqual(["code", "message", "param", "type"]);
  expect(r.json.error.code).toBe(code);
  expect(r.json.error.message.length).toBeGreaterThan(0);
}

/** Writes raw bytes on a new connection; the answer (parsed) and whether Envoy closed the connection. */
function rawExchange(hostPort: string, request: string): Promise<Reply & { closed: boolean }> {
  const [host, port] = hostPort.split(":");
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), host);
    let data = "";
    let closed = false;
    const finish = () => {
      socket.destroy();
      const [head, ...rest] = data.split("\r\n\r\n");
      const [statusLine, ...lines] = head.split("\r\n");
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
      const body = rest.join("\r\n\r\n");
      resolve({ status: Number(statusLine.split(" ")[1]), headers, body, json: JSON.parse(body), closed });
    };
    socket.setEncoding("utf8").on("data", (c: string) => (data += c));
    socket.on("close", () => {
      closed = true;
      finish();
    });
    socket.on("error", reject);
    socket.write(request);
    setTimeout(finish, 1_000);
  });
}

const CHAT = (model: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4, ...extra });

// Engine admin endpoints (vLLM, SGLang) and the metrics page, plainly and disguised.
const ADMIN_PATHS = [
  "/metrics", "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/collective_rpc", "/reset_prefix_cache",
  "/sleep", "/wake_up", "/is_sleeping", "/start_profile", "/flush_cache", "/server_info",
  "/v1/../metrics", "/v1/%2e%2e/reset_prefix_cache", "/v1/%2E%2E/sleep", "//metrics", "/v1/./../collective_rpc",
  "/v1/chat/completions/../../metrics", "/v1/models/../../sleep",
];

describe("without the Wasm filter, the route table alone", () => {
  let stack: TestStack;
  let pod: PlainPod;
  let decoy: PlainPod;

  beforeAll(async () => {
    pod = await startPlainPod("llama-a");
    decoy = await startPlainPod("decoy");
    stack = await startTestStack(
      [{ name: "llama", baseModel: "llama-3.1-8b", pods: [], extraEndpoints: [pod.address] }],
      { maxBodyBytes: MAX_BODY },
      { wasmFilter: false },
    );
  });
  afterAll(async () => {
    await stack?.close();
    await pod?.close();
    await decoy?.close();
  });

  it("never lets spoofed x-gateway-* headers reach a server, outside the pools or in them", async () => {
    for (const target of [decoy.address, pod.address]) {
      for (const headers of [
        { "x-gateway-pool": "llama", "x-gateway-destination-endpoint": target },
        { "X-Gateway-Pool": "llama", "X-GATEWAY-DESTINATION-ENDPOINT": `${target},${target}` },
        { "x-gateway-pool": "llama", "x-gateway-reply": "1" },
      ]) {
        const r = await send(stack.gatewayUrl, "POST", "/v1/chat/completions", { body: CHAT("llama-3.1-8b"), headers });
        expectOpenAIError(r, 503, "service_unavailable");
        expectOpenAIError(await send(stack.gatewayUrl, "GET", "/admin", { headers }), 404, "unknown_url");
      }
    }
    expect(decoy.requests).toEqual([]);
    expect(pod.requests).toEqual([]);
  });

  it("fails closed on the paths the filter answers", async () => {
    for (const path of ["/v1/models", "/v1/models/llama-3.1-8b", "/health"]) {
      expectOpenAIError(await send(stack.gatewayUrl, "GET", path), 503, "service_unavailable");
    }
  });

  it("answers a body above the buffer limit with its own 413", async () => {
    const big = CHAT("llama-3.1-8b", { padding: "x".repeat(BUFFER_LIMIT) });
    expectOpenAIError(await send(stack.gatewayUrl, "POST", "/v1/chat/completions", { body: big }), 413, "request_too_large");
    expect(pod.requests).toEqual([]);
  });
});

describe("with the filter", () => {
  let stack: TestStack;
  let pods: PlainPod[];
  let host: string;

  beforeAll(async () => {
    pods = [await startPlainPod("llama-a"), await startPlainPod("llama-b")];
    stack = await startTestStack(
      [{ name: "llama", baseModel: "llama-3.1-8b", pods: [], extraEndpoints: pods.map((p) => p.address) }],
      { maxBodyBytes: MAX_BODY },
    );
    host = stack.envoy.listenerAddresses.llm_gateway;
    await waitFor("the filter to route", async () =>
      (await send(stack.gatewayUrl, "POST", "/v1/chat/completions", { body: CHAT("llama-3.1-8b") })).status === 200);
    for (const p of pods) p.requests.length = 0;
  });
  afterAll(async () => {
    await stack?.close();
    for (const p of pods ?? []) await p.close();
  });

  it("never reaches an engine's admin or metrics endpoint, however the path is spelled", async () => {
    for (const path of ADMIN_PATHS) {
      for (const method of ["GET", "POST"]) {
        const r = await send(stack.gatewayUrl, method, path, method === "POST" ? { body: "{}" } : {});
        expectOpenAIError(r, 404, "unknown_url");
        expect(r.json.error.message).not.toMatch(/%2e|\.\.|\/\//i); // it names the normalised path
      }
    }
    expect(pods.flatMap((p) => p.requests)).toEqual([]);
  });

  it("normalises an inference path before routing: the pod sees the plain one", async () => {
    for (const path of ["/v1//chat/completions", "/v1/x/../chat/completions", "/v1/%63hat/completions"]) {
      const r = await send(stack.gatewayUrl, "POST", path, { body: CHAT("llama-3.1-8b") });
      expect(r.status, path).toBe(200);
    }
    expect(pods.flatMap((p) => p.requests)).toEqual(Array(3).fill("POST /v1/chat/completions"));
    for (const p of pods) p.requests.length = 0;
  });

  it("redirects an escaped slash to the plain path", async () => {
    const r = await send(stack.gatewayUrl, "GET", "/v1/models/meta-llama%2FLlama-3.1-8B");
    expect(r.status).toBe(307);
    expect(r.headers.location).toBe("/v1/models/meta-llama/Llama-3.1-8B");
  });

  it("answers unknown paths 404 and wrong methods 405 with Allow, in OpenAI format", async () => {
    expectOpenAIError(await send(stack.gatewayUrl, "GET", "/v2/chat/completions"), 404, "unknown_url");
    expectOpenAIError(await send(stack.gatewayUrl, "POST", "/v1/audio/speech", { body: "{}" }), 404, "unknown_url");
    for (const path of ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]) {
      for (const method of ["GET", "PUT", "DELETE"]) {
        const r = await send(stack.gatewayUrl, method, path);
        expectOpenAIError(r, 405, "method_not_allowed");
        expect(r.headers.allow).toBe("POST");
      }
    }
    for (const path of ["/v1/models", "/v1/models/llama-3.1-8b", "/health"]) {
      const r = await send(stack.gatewayUrl, "POST", path, { body: "{}" });
      expectOpenAIError(r, 405, "method_not_allowed");
      expect(r.headers.allow).toBe("GET");
    }
    expect(pods.flatMap((p) => p.requests)).toEqual([]);
  });

  it("leaves the filter's own replies as it made them", async () => {
    const models = await send(stack.gatewayUrl, "GET", "/v1/models");
    expect(models.status).toBe(200);
    expect(models.json.data.map((m: { id: string }) => m.id)).toEqual(["llama-3.1-8b"]);
    const unknownModel = await send(stack.gatewayUrl, "POST", "/v1/chat/completions", { body: CHAT("gpt-99") });
    expectOpenAIError(unknownModel, 404, "model_not_found");
    const bad = await send(stack.gatewayUrl, "POST", "/v1/chat/completions", { body: "{" });
    expect(bad.status).toBe(400);
    expect(bad.json.error.message).toMatch(/JSON/);
  });

  it("answers a body above the buffer limit with 413 in OpenAI format, whoever stops it", async () => {
    // Over max_body_bytes on an inference path: the filter.
    const overMax = CHAT("llama-3.1-8b", { padding: "x".repeat(MAX_BODY) });
    expectOpenAIError(await send(stack.gatewayUrl, "POST", "/v1/chat/completions", { body: overMax }), 413, "request_too_large");
    // Elsewhere the filter lets the request through and Envoy's buffer limit stops it.
    const overBuffer = "x".repeat(BUFFER_LIMIT + 1);
    expectOpenAIError(await send(stack.gatewayUrl, "POST", "/v1/files", { body: overBuffer }), 413, "request_too_large");
    expect(pods.flatMap((p) => p.requests)).toEqual([]);
  });

  it("answers HTTP/1.0 (426), oversized headers (431) and a malformed request (400) in OpenAI format", async () => {
    // A client's reply marker is no way out of the format, even where Envoy answers before any filter runs.
    const old = await rawExchange(host, "GET /v1/models HTTP/1.0\r\nx-gateway-reply: 1\r\n\r\n");
    expectOpenAIError(old, 426, "upgrade_required");
    const bigHeaders = await send(stack.gatewayUrl, "GET", "/v1/models", { headers: { "x-big": "a".repeat(70 * 1024) } });
    expectOpenAIError(bigHeaders, 431, "request_headers_too_large");
    const malformed = await rawExchange(host, "GET /v1/models HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n");
    expectOpenAIError(malformed, 400, "bad_request");
    expect(malformed.json.error.message).toMatch(/codec/);
  });

  it("keeps the HTTP/1.1 connection open after a 404, 405 or the filter's 400 for a complete request", async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const { hostname, port } = new URL(stack.gatewayUrl);
    const request = (method: string, path: string, body?: string) =>
      new Promise<{ status: number; socket: net.Socket; connection?: string }>((resolve, reject) => {
        const req = http.request(
          { host: hostname, port, method, path, agent, headers: body ? { "content-type": "application/json", "content-length": Buffer.byteLength(body) } : {} },
          (res) => {
            res.resume();
            res.on("end", () => resolve({ status: res.statusCode!, socket: req.socket!, connection: res.headers.connection }));
          },
        );
        req.on("error", reject);
        req.end(body);
      });
    try {
      const answers = [
        await request("POST", "/v1/audio/speech", '{"input":"hi"}'),
        await request("PUT", "/v1/chat/completions", CHAT("llama-3.1-8b")),
        await request("GET", "/nope"),
        await request("POST", "/v1/chat/completions", '{"model":"llama-3.1-8b","messages":['),
        await request("POST", "/v1/chat/completions", CHAT("llama-3.1-8b")),
      ];
      expect(answers.map((a) => a.status)).toEqual([404, 405, 404, 400, 200]);
      for (const a of answers) {
        expect(a.connection).not.toBe("close");
        expect(a.socket).toBe(answers[0].socket);
      }
    } finally {
      agent.destroy();
    }
  });

  it("refuses to start a second Envoy on the same port (no reuse_port sharing)", async () => {
    const port = Number(host.split(":")[1]);
    const yaml = renderEnvoyConfig({
      ...envoyParamsFromGatewayConfig(stack.config, { wasmPath: filterWasmPath }),
      gatewayPort: port,
      adminPort: 0,
      aggregatorPort: stack.aggregator.grpcPort,
    });
    const second = await startEnvoy({ configYaml: yaml, concurrency: 2 }).catch((err: Error) => err);
    if (!(second instanceof Error)) await second.stop();
    expect(second).toBeInstanceOf(Error);
    expect((second as Error).message).toMatch(/cannot bind|address already in use/i);
    expect((await send(stack.gatewayUrl, "POST", "/v1/chat/completions", { body: CHAT("llama-3.1-8b") })).status).toBe(200);
  });
});

describe("retries and ejection", () => {
  let stack: TestStack;
  let failing: PlainPod;
  let dying: PlainPod;
  let healthy: PlainPod;

  async function hostFlags(): Promise<Record<string, string>> {
    const text = await (await fetch(`${stack.envoy.adminUrl}/clusters`)).text();
    const out: Record<string, string> = {};
    for (const m of text.matchAll(/^llm_gateway_pool_flaky::([\d.:]+)::health_flags::(\S+)$/gm)) out[m[1]] = m[2];
    return out;
  }

  beforeAll(async () => {
    // The healthy pod looks busy, so the filter prefers the others as long as it trusts them.
    failing = await startPlainPod("failing", { status: 500 });
    dying = await startPlainPod("dying", { waiting: 8 });
    healthy = await startPlainPod("healthy", { waiting: 8 });
    stack = await startTestStack([
      {
        name: "flaky",
        baseModel: "flaky-7b",
        pods: [],
        extraEndpoints: [failing.address, dying.address, healthy.address, await closedPort()],
      },
      { name: "ghost", baseModel: "ghost-7b", pods: [], extraEndpoints: [await closedPort()] },
    ]);
  });
  afterAll(async () => {
    await stack?.close();
    for (const p of [failing, dying, healthy]) await p?.close();
  });

  it("serves every request, streamed or not, while a pod answers 500 with an empty queue, and ejects that pod", async () => {
    await waitFor("the aggregator to see every pod", () =>
      stack.aggregator.current().pools[0].endpoints.filter((e) => e.fresh).length === 3);

    for (let i = 0; i < 12; i++) {
      const stream = i % 2 === 1;
      const r = await send(stack.gatewayUrl, "POST", "/v1/chat/completions", { body: CHAT("flaky-7b", { stream }) });
      expect(r.status, r.body).toBe(200);
      expect(r.headers["x-served-by"]).toMatch(/^(healthy|dying)$/);
      if (stream) expect(r.body).toMatch(/data: \[DONE\]/);
    }
    // The filter named it first once: Envoy moved that request on, and the
    // filter's ledger (shared by both workers) ejected the pod at once.
    expect(failing.requests.length).toBeGreaterThanOrEqual(1);
    expect(failing.requests.length).toBeLessThanOrEqual(2);
    const stats = await stack.envoy.stats("cluster\\.llm_gateway_pool_flaky\\.upstream_rq_retry$");
    expect(stats["cluster.llm_gateway_pool_flaky.upstream_rq_retry"]).toBe(failing.requests.length);
    await waitFor("the filter to count the failing pod ejected", async () =>
      (await stack.envoy.stats("llm_gateway\\.pool_pods_ejected;pool=flaky$"))["wasmcustom.llm_gateway.pool_pods_ejected;pool=flaky"] === 1);
  });

  it("moves on from a pod that died after its last scrape; once its scrapes fail, Envoy's balancer has it unhealthy", async () => {
    dying.status = 200;
    dying.waiting = 0;
    await waitFor("dying to look idle", () =>
      stack.aggregator.current().pools[0].endpoints.find((e) => e.address === dying.address)?.waiting === 0);
    await waitForWorkers(stack);
    await dying.close(); // its metrics stay fresh for up to staleAfterMs

    for (let i = 0; i < 6; i++) {
      const r = await send(stack.gatewayUrl, "POST", "/v1/chat/completions", { body: CHAT("flaky-7b", { stream: i % 2 === 0 }) });
      expect(r.status, r.body).toBe(200);
      expect(r.headers["x-served-by"]).toBe("healthy");
    }
    // The filter named it once: Envoy moved that request on and the ledger ejected it. Its
    // scrapes then fail, and the aggregator has Envoy's fallback balancer skip it too.
    await waitFor("the aggregator to mark the dead pod unhealthy in EDS", async () => (await hostFlags())[dying.address]?.includes("/failed_eds_health") === true);
  });

  it("answers 503 in OpenAI format when no pod of the pool takes the connection", async () => {
    const r = await send(stack.gatewayUrl, "POST", "/v1/chat/completions", { body: CHAT("ghost-7b") });
    expectOpenAIError(r, 503, "upstream_unavailable");
    expect(r.json.error.type).toBe("upstream_error");
  });
});
