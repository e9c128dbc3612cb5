// Envoy's side of model-name routes and traffic gates, on a real Envoy with
// two workers: the rendered routes, rate limit and jwt_authn claim copies,
// with a Lua stand-in in the Wasm filter's place that sets x-gateway-pool and
// x-gateway-model-name from test headers and clears the route cache, as the
// filter does. Pools are static clusters of one echo server, so what reaches
// a pod is visible. (The filter's own part is in the end-to-end tests.)
import { generateKeyPairSync, sign } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml, stringify } from "yaml";
import { CLAIM_HEADERS, renderEnvoyConfig } from "../../host/envoy/index.js";
import { startEnvoy, type EnvoyProcess } from "../../testing/launcher/envoy-process.js";
import { filterWasmPath } from "../../host/paths.js";

const ISSUER = "https://auth.example.test";
const keys = generateKeyPairSync("rsa", { modulusLength: 2048 });
const dir = mkdtempSync(join(tmpdir(), "gw-model-routes-"));

function token(claims: Record<string, unknown>): string {
  const b64 = (v: object) => Buffer.from(JSON.stringify(v)).toString("base64url");
  const head = `${b64({ alg: "RS256", typ: "JWT", kid: "k1" })}.${b64({ iss: ISSUER, exp: Math.floor(Date.now() / 1000) + 600, ...claims })}`;
  return `${head}.${sign("sha256", Buffer.from(head), keys.privateKey).toString("base64url")}`;
}

// Plays the Wasm filter: sets the routing headers, then has Envoy pick the route again.
const STAND_IN = `
function envoy_on_request(handle)
  local headers = handle:headers()
  local pool = headers:get("test-pool")
  if pool then headers:replace("x-gateway-pool", pool) end
  local model = headers:get("test-model")
  if model then headers:replace("x-gateway-model-name", model) end
  handle:clearRouteCache()
end
`;

let pod: http.Server;
let envoy: EnvoyProcess;
let url: string;

/** Answers with the request headers it got, after x-test-delay-ms. */
function startEchoPod(): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      setTimeout(() => {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ headers: req.headers }));
      }, Number(req.headers["x-test-delay-ms"] ?? 0));
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

/** The rendered gateway, with the stand-in for the filter and static pools at the echo pod. */
function gatewayYaml(podPort: number, jwksFile: string): string {
  const doc = parseYaml(
    renderEnvoyConfig({
      gatewayHost: "127.0.0.1",
      gatewayPort: 0,
      adminPort: 0,
      aggregatorHost: "127.0.0.1",
      aggregatorPort: 1,
      wasmPath: filterWasmPath,
      maxBodyBytes: 64 * 1024,
      pools: ["llama", "qwen"],
      jwt: { issuer: ISSUER, audiences: [], jwksFile },
      modelRoutes: [
        // Long enough for any machine to answer at once within it.
        { model: "slow-7b", pools: ["llama"], timeoutMs: 1_000 },
        { model: "limited-7b", pools: ["qwen"], rateLimit: { requestsPerS: 1, burst: 2 } },
      ],
      traffic: { critical: { claim: "tier", values: ["gold"] }, debug: { claim: "org.role", values: ["sre"] } },
    }),
  );
  delete doc.bootstrap_extensions;
  delete doc.dynamic_resources;
  const filters = doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters;
  const wasm = filters.findIndex((f: { name: string }) => f.name === "envoy.filters.http.wasm");
  filters[wasm] = {
    name: "envoy.filters.http.lua",
    typed_config: { "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua", default_source_code: { inline_string: STAND_IN } },
  };
  for (const cluster of doc.static_resources.clusters) {
    if (cluster.type !== "EDS") continue;
    cluster.type = "STATIC";
    delete cluster.eds_cluster_config;
    cluster.load_assignment = {
      cluster_name: cluster.name,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: "127.0.0.1", port_value: podPort } } } }] }],
    };
  }
  return stringify(doc);
}

beforeAll(async () => {
  const jwksFile = join(dir, "jwks.json");
  writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...keys.publicKey.export({ format: "jwk" }), kid: "k1", alg: "RS256", use: "sig" }] }));
  pod = await startEchoPod();
  envoy = await startEnvoy({ configYaml: gatewayYaml((pod.address() as AddressInfo).port, jwksFile), concurrency: 2 });
  url = `http://${envoy.listenerAddresses.llm_gateway}/v1/chat/completions`;
}, 30_000);

afterAll(async () => {
  await envoy?.stop();
  await new Promise((r) => pod?.close(r));
  rmSync(dir, { recursive: true, force: true });
});

async function ask(headers: Record<string, string>, claims: Record<string, unknown> = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token(claims)}`, ...headers },
    body: JSON.stringify({ model: headers["test-model"] ?? "m", messages: [] }),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, any> };
}

describe("model-name routes", () => {
  it("are chosen after the stand-in set the headers, and bound the response time to the model's timeout", async () => {
    const slow = await ask({ "test-pool": "llama", "test-model": "slow-7b", "x-test-delay-ms": "2000" });
    expect(slow.status).toBe(504);
    expect(slow.body.error).toMatchObject({ type: "upstream_error", code: "upstream_timeout" });
    // Another model in the same pool takes the pool's route: no timeout.
    expect((await ask({ "test-pool": "llama", "test-model": "other-7b", "x-test-delay-ms": "1500" })).status).toBe(200);
    expect((await ask({ "test-pool": "llama", "test-model": "slow-7b" })).status).toBe(200);
    // No pool chosen: the fail-closed route, model name or not.
    expect((await ask({ "test-model": "slow-7b" })).status).toBe(503);
  });

  it("rate-limit a model on its own route only: 429 in the OpenAI format with retry-after", async () => {
    // Sent until three are refused: past the burst, a token a second passes, however slowly they go.
    const answers = [];
    const started = Date.now();
    while (answers.length < 30 && answers.filter((a) => a.status === 429).length < 3) {
      answers.push(await ask({ "test-pool": "qwen", "test-model": "limited-7b" }));
    }
    const elapsedS = (Date.now() - started) / 1000;
    const statuses = answers.map((a) => a.status);
    expect(statuses.slice(0, 2)).toEqual([200, 200]); // the burst
    expect(statuses.filter((s) => s === 429).length).toBe(3);
    expect(statuses.filter((s) => s === 200).length, JSON.stringify({ statuses, elapsedS })).toBeLessThanOrEqual(2 + Math.ceil(elapsedS));
    const refused = answers.find((a) => a.status === 429)!;
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(refused.headers.get("content-type")).toMatch(/application\/json/);
    expect(refused.body.error).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded", param: null });
    const stats = await envoy.stats("http_local_rate_limit");
    expect(stats["llm_gateway_model_limited-7b.http_local_rate_limit.rate_limited"]).toBe(statuses.filter((s) => s === 429).length);

    // The same pool for another model, and the filter-level config: no limit.
    for (let i = 0; i < 6; i++) expect((await ask({ "test-pool": "qwen", "test-model": "other-7b" })).status).toBe(200);
  });
});

describe("claim gates", () => {
  const route = { "test-pool": "llama", "test-model": "other-7b" };
  const spoofed = { [CLAIM_HEADERS.critical]: "gold", [CLAIM_HEADERS.debug]: "sre" };

  it("reach the filter only as jwt_authn copied them from the verified token; a client's own copies are gone", async () => {
    const granted = await ask({ ...route, ...spoofed }, { tier: "gold", org: { role: "sre" } });
    expect(granted.status).toBe(200);
    expect(granted.body.headers[CLAIM_HEADERS.critical]).toBe("gold");
    expect(granted.body.headers[CLAIM_HEADERS.debug]).toBe("sre");

    const plain = await ask({ ...route, ...spoofed }, { tier: "silver" });
    expect(plain.body.headers[CLAIM_HEADERS.critical]).toBe("silver");
    expect(plain.body.headers).not.toHaveProperty(CLAIM_HEADERS.debug);

    const none = await ask({ ...route, ...spoofed });
    expect(none.body.headers).not.toHaveProperty(CLAIM_HEADERS.critical);
    expect(none.body.headers).not.toHaveProperty(CLAIM_HEADERS.debug);
  });

  it("carry a list claim as base64 of its JSON, a number or boolean as text", async () => {
    const list = await ask(route, { tier: ["silver", "gold"], org: { role: true } });
    expect(Buffer.from(list.body.headers[CLAIM_HEADERS.critical], "base64").toString()).toBe('["silver","gold"]');
    expect(list.body.headers[CLAIM_HEADERS.debug]).toBe("true");
    expect((await ask(route, { tier: 3 })).body.headers[CLAIM_HEADERS.critical]).toBe("3");
  });
});
