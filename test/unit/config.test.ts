import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { CONTRACT } from "../../host/contract.js";
import { parse } from "yaml";
import { envoyParamsFromGatewayConfig, renderEnvoyXds } from "../../host/envoy/index.js";
import { BUILTIN_PROFILES, ConfigError, DEFAULT_WEIGHTS, loadGatewayConfig, parseEndpoint, parseGatewayConfig, resolveConfigHosts } from "../../host/config.js";

const LOCAL_YAML = fileURLToPath(new URL("../../config/local.yaml", import.meta.url));

const MINIMAL = `
pools:
  - name: llama
    baseModel: llama-3.1-8b
    engine: vllm
    endpoints: ["127.0.0.1:18001"]
`;

/** The issue lines of the ConfigError that parsing `text` throws. */
function issues(text: string): string[] {
  try {
    parseGatewayConfig(text, "bad.yaml");
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).message).toMatch(/^bad\.yaml: invalid gateway config/);
    return (err as ConfigError).issues;
  }
  throw new Error("expected a ConfigError");
}

const twoPools = (second: string) => `
pools:
  - name: llama
    baseModel: llama-3.1-8b
    engine: vllm
    adapters: [sql-lora]
    endpoints: ["127.0.0.1:18001"]
  - ${second}
`;

describe("gateway config", () => {
  it("fills defaults around a minimal file", () => {
    const c = parseGatewayConfig(MINIMAL);
    expect(c.apiVersion).toBe("llm-gateway/v1");
    expect(c.kind).toBe("InferenceGatewayConfig");
    expect(c.gateway).toEqual({
      host: "127.0.0.1", port: 8080, adminPort: 9901, maxBodyBytes: 4194304,
      staleView: { maxAgeMs: 3000, policy: "failOpen", retryAfterS: 1 },
      passiveHealth: { ejectAfterFailures: 3, ejectMs: 10000, saturatedBackoffMs: 1000 },
      plaintext: false,
      limits: {
        requestHeadersTimeoutMs: 10_000, requestTimeoutMs: 660_000, streamIdleTimeoutMs: 600_000, connectionIdleTimeoutMs: 300_000,
        maxConcurrentStreams: 100, maxHeapBytes: 256 * 1024 * 1024, maxConnections: 50_000, connectionBufferBytes: 64 * 1024,
      },
    });
    expect(c.aggregator).toEqual({
      host: "127.0.0.1", port: 50051, metricsPort: 9464, scrapeIntervalMs: 50, scrapeTimeoutMs: 1000, staleAfterMs: 1000, heartbeatMs: 1000, plaintext: false, maxStreams: 256,
      shareIntervalMs: 20,
    });
    expect(c.pools[0]).toEqual({
      name: "llama",
      baseModel: "llama-3.1-8b",
      engine: "vllm",
      adapters: [],
      profile: "latency",
      weights: { queue: 2, kvCache: 1, running: 1, lora: 2, prefix: 4 },
      weightOverrides: {},
      endpoints: ["127.0.0.1:18001"],
      batchSlots: 256,
    });
  });

  it("has no place for fake pods: the gateway never starts pods (they are testing/fakeserver's own file)", () => {
    expect(issues(`${MINIMAL}\nlocalFleet: { pods: [] }\n`)).toEqual(['<root>: unknown field "localFleet"']);
  });

  it("loads config/local.yaml: 2 models, 4 pods", () => {
    const c = loadGatewayConfig(LOCAL_YAML);
    expect(c.gateway.port).toBe(8080);
    expect(c.aggregator.port).toBe(50051);
    expect(c.aggregator.metricsPort).toBe(9464);
    expect(c.pools.map((p) => [p.name, p.baseModel, p.adapters])).toEqual([
      ["llama", "llama-3.1-8b", ["sql-lora", "chat-lora"]],
      ["qwen", "qwen3-32b", []],
    ]);
    expect(c.pools.flatMap((p) => p.endpoints)).toEqual(["127.0.0.1:18001", "127.0.0.1:18002", "127.0.0.1:18003", "127.0.0.1:18004"]);
  });

  it("takes a stats port only beside a fixed admin port, and not on another port of the gateway", () => {
    const base = "pools: [{ name: p, baseModel: m, endpoints: [\"10.0.0.1:8000\"] }]\n";
    expect(parseGatewayConfig(`gateway: { adminPort: 9901, statsPort: 9902 }\n${base}`).gateway.statsPort).toBe(9902);
    expect(() => parseGatewayConfig(`gateway: { adminPort: 0, statsPort: 9902 }\n${base}`)).toThrow(/gateway\.statsPort: needs a fixed gateway\.adminPort/);
    expect(() => parseGatewayConfig(`gateway: { port: 8080, statsPort: 8080 }\n${base}`)).toThrow(/gateway\.statsPort: 8080 is already gateway\.port/);
  });

  it("names the field of a bad value", () => {
    expect(issues(twoPools(`{ name: qwen, baseModel: q, engine: vllm, endpoints: ["127.0.0.1:1"], weights: { queue: -1 } }`))).toEqual([
      "pools[1].weights.queue: expected a number >= 0",
    ]);
    expect(issues(twoPools(`{ name: qwen, baseModel: q, engine: no-such-engine, endpoints: ["127.0.0.1:1"] }`))).toEqual([
      "pools[1].engine: expected one of vllm, sglang, tgi, llamacpp, trtllm",
    ]);
    expect(issues(twoPools(`{ name: qwen, engine: vllm, endpoints: ["127.0.0.1:1"] }`))).toEqual(["pools[1].baseModel: is required"]);
    expect(issues(`${MINIMAL}\ngateway: { port: 70000, maxBodyBytes: 1.5 }\n`)).toEqual([
      "gateway.port: expected an integer port 0..65535",
      "gateway.maxBodyBytes: expected an integer > 0",
    ]);
    // Past the filter's limit Envoy would refuse the rendered filter at start: the config says so first.
    expect(issues(`${MINIMAL}\ngateway: { maxBodyBytes: ${CONTRACT.limits.maxBodyBytes + 1} }\n`)).toEqual([
      `gateway.maxBodyBytes: expected at most ${CONTRACT.limits.maxBodyBytes} (the filter's limit)`,
    ]);
    expect(parseGatewayConfig(`${MINIMAL}\ngateway: { maxBodyBytes: ${CONTRACT.limits.maxBodyBytes} }\n`).gateway.maxBodyBytes).toBe(CONTRACT.limits.maxBodyBytes);
    expect(issues(`${MINIMAL}\naggregator: { scrapeIntervalMs: "fast" }\n`)).toEqual(["aggregator.scrapeIntervalMs: expected an integer > 0"]);
    expect(issues("pools: []")).toEqual(["pools: expected at least one pool"]);
    expect(issues("gateway: {}")).toEqual(["pools: is required"]);
    expect(issues(`${MINIMAL}\napiVersion: v2\n`)).toEqual(['apiVersion: expected "llm-gateway/v1" or "llm-gateway.io/v1"']);
  });

  it("rejects unknown fields, naming them", () => {
    expect(issues(twoPools(`{ name: qwen, baseModel: q, engine: vllm, endpoints: ["127.0.0.1:1"], weigths: {} }`))).toEqual([
      'pools[1]: unknown field "weigths"',
    ]);
  });

  it("checks endpoint syntax", () => {
    expect(issues(twoPools(`{ name: qwen, baseModel: q, engine: vllm, endpoints: ["127.0.0.1:1", "http://x:80", "host", "h:0", "999.1.1.1:80"] }`))).toEqual(
      [1, 2, 3, 4].map((i) => `pools[1].endpoints[${i}]: expected host:port (e.g. 127.0.0.1:8000, vllm-0:8000, [::1]:8000)`),
    );
    expect(parseEndpoint("vllm-0.pods.svc:8000")).toEqual({ host: "vllm-0.pods.svc", port: 8000 });
    expect(parseEndpoint("[::1]:8000")).toEqual({ host: "::1", port: 8000 });
    expect(parseEndpoint("[nope]:8000")).toBeNull();
  });

  it("takes an endpoint as host:port or { address, capacity }; a pool with any capacity uses configured ones only, 1 by default", () => {
    const c = parseGatewayConfig(`
pools:
  - name: mixed
    baseModel: m
    endpoints: [{ address: "h100-0:8000", capacity: 1 }, "10.0.0.2:8000", { address: "a10g-0:8000", capacity: 0.35 }, { address: "[::1]:8000" }]
  - name: learned
    baseModel: n
    endpoints: ["10.0.1.1:8000", { address: "10.0.1.2:8000" }]
`);
    expect(c.pools[0].endpoints).toEqual(["h100-0:8000", "10.0.0.2:8000", "a10g-0:8000", "[::1]:8000"]);
    expect(c.pools[0].capacities).toEqual([1, 1, 0.35, 1]);
    expect(c.pools[1].endpoints).toEqual(["10.0.1.1:8000", "10.0.1.2:8000"]);
    expect(c.pools[1]).not.toHaveProperty("capacities");
  });

  it("names the bad part of an endpoint given as a mapping", () => {
    const pool = (endpoints: string) => twoPools(`{ name: qwen, baseModel: q, endpoints: ${endpoints} }`);
    const CAPACITY = "expected a number > 0 (the pod's speed relative to the pool's others)";
    const ENTRY = "expected host:port, or { address: host:port, capacity: number > 0 }";
    expect(issues(pool(`[{ address: "10.0.0.1:80", capacity: 0 }, { address: "10.0.0.2:80", capacity: fast }]`))).toEqual([
      `pools[1].endpoints[0].capacity: ${CAPACITY}`,
      `pools[1].endpoints[1].capacity: ${CAPACITY}`,
    ]);
    expect(issues(pool(`[{ address: "http://x:80", capacity: 2 }]`))).toEqual([
      "pools[1].endpoints[0].address: expected host:port (e.g. 127.0.0.1:8000, vllm-0:8000, [::1]:8000)",
    ]);
    expect(issues(pool(`[{ address: "10.0.0.1:80", speed: 2 }]`))).toEqual(['pools[1].endpoints[0]: unknown field "speed"']);
    expect(issues(pool(`[{ capacity: 2 }, 8000, [a]]`))).toEqual([
      "pools[1].endpoints[0].address: is required",
      `pools[1].endpoints[1]: ${ENTRY}`,
      `pools[1].endpoints[2]: ${ENTRY}`,
    ]);
    expect(issues(pool(`["10.0.0.1:80", { address: "10.0.0.1:80", capacity: 2 }]`))).toEqual([
      'pools[1].endpoints[1]: duplicate endpoint "10.0.0.1:80" (also endpoints[0])',
    ]);
  });

  it("gives a pool batchSlots from the file, else its engine's default batch limit", () => {
    const c = parseGatewayConfig(`
pools:
  - { name: a, baseModel: ma, endpoints: ["127.0.0.1:1"] }
  - { name: b, baseModel: mb, engine: sglang, endpoints: ["127.0.0.1:2"] }
  - { name: c, baseModel: mc, engine: tgi, endpoints: ["127.0.0.1:3"] }
  - { name: d, baseModel: md, engine: tgi, batchSlots: 1024, kubernetes: { namespace: m, selector: "app=d", port: 80 } }
`);
    expect(c.pools.map((p) => [p.engine, p.batchSlots])).toEqual([["vllm", 256], ["sglang", 256], ["tgi", 128], ["tgi", 1024]]);
    const bad = (v: string) => issues(twoPools(`{ name: qwen, baseModel: q, batchSlots: ${v}, endpoints: ["127.0.0.1:2"] }`));
    for (const v of ["0", "1.5", "100001", '"64"']) expect(bad(v)).toEqual(["pools[1].batchSlots: expected an integer 1..100000"]);
    expect(parseGatewayConfig(twoPools(`{ name: qwen, baseModel: q, batchSlots: 100000, endpoints: ["127.0.0.1:2"] }`)).pools[1].batchSlots).toBe(100_000);
  });

  it("requires unique pool names and unique model names across pools", () => {
    expect(issues(twoPools(`{ name: llama, baseModel: other, engine: vllm, endpoints: ["127.0.0.1:1"] }`))).toEqual([
      'pools[1].name: duplicate pool name "llama" (also pools[0])',
    ]);
    expect(issues(twoPools(`{ name: qwen, baseModel: sql-lora, engine: vllm, adapters: [llama-3.1-8b], endpoints: ["127.0.0.1:1"] }`))).toEqual([
      'pools[1].baseModel: model name "sql-lora" is already used by pools[0].adapters[0]',
      'pools[1].adapters[0]: model name "llama-3.1-8b" is already used by pools[0].baseModel',
    ]);
  });

  it("takes the replicas' share interval into the link's settings, 0 turning sharing off, and refuses nonsense naming the field", () => {
    const link = (text: string) =>
      JSON.parse(parse(renderEnvoyXds(envoyParamsFromGatewayConfig(parseGatewayConfig(text), { wasmPath: "/x/filter.wasm" })).bootstrap).bootstrap_extensions[0].typed_config.config.configuration.value);
    expect(link(MINIMAL)).toMatchObject({ aggregator_cluster: "llm_gateway_aggregator", share_interval_ms: 20 });
    expect(link(`${MINIMAL}
aggregator: { shareIntervalMs: 0 }
`)).toMatchObject({ share_interval_ms: 0 });
    for (const bad of ["-1", "2.5", "60001", '"fast"']) {
      expect(issues(`${MINIMAL}
aggregator: { shareIntervalMs: ${bad} }
`)[0]).toMatch(/^aggregator\.shareIntervalMs: expected an integer 0\.\.60000/);
    }
  });

  it("requires staleAfterMs above the scrape interval", () => {
    expect(issues(`${MINIMAL}\naggregator: { scrapeIntervalMs: 100, staleAfterMs: 100 }\n`)[0]).toMatch(/^aggregator\.staleAfterMs: must be greater than scrapeIntervalMs \(100\)/);
    expect(issues(`${MINIMAL}\naggregator: { heartbeatMs: 3000 }\n`)[0]).toMatch(/^gateway\.staleView\.maxAgeMs: must be greater than aggregator\.heartbeatMs \(3000\)/);
    expect(issues(`${MINIMAL}\ngateway: { staleView: { policy: failClosed } }\n`)[0]).toMatch(/^gateway\.staleView\.policy: expected failOpen or reject/);
  });

  it("reports YAML syntax errors and unreadable files with their source", () => {
    expect(issues("pools: [")[0]).toMatch(/^YAML syntax error: /);
    expect(() => loadGatewayConfig("/nonexistent/gw.yaml")).toThrow(/^\/nonexistent\/gw\.yaml: invalid gateway config:\n {2}cannot read file/);
  });

  it("accepts only an IP literal or a host name for gateway.host and aggregator.host", () => {
    expect(issues(`${MINIMAL}\ngateway: { host: "http://gw" }\naggregator: { host: "a b" }\n`)).toEqual([
      "gateway.host: expected a host name or IP address",
      "aggregator.host: expected a host name or IP address",
    ]);
    expect(issues(`${MINIMAL}\ngateway: { host: "" }\n`)).toEqual(["gateway.host: expected a host name or IP address"]);
    expect(issues(`${MINIMAL}\ngateway: { host: 300.1.1.1 }\n`)).toEqual(["gateway.host: expected a host name or IP address"]);
    const c = parseGatewayConfig(`${MINIMAL}\ngateway: { host: "::1" }\naggregator: { host: gw.internal, plaintext: true }\n`);
    expect([c.gateway.host, c.aggregator.host]).toEqual(["::1", "gw.internal"]);
  });
});

describe("resolveConfigHosts", () => {
  const withHosts = (gateway: string, aggregator: string) =>
    parseGatewayConfig(`${MINIMAL}\ngateway: { host: "${gateway}", plaintext: true }\naggregator: { host: "${aggregator}", plaintext: true }\n`);

  it("turns names into IPs (IPv4 first) and leaves literals and pool endpoints alone", async () => {
    const config = parseGatewayConfig(`
gateway: { host: localhost }
aggregator: { host: "::1" }
pools: [{ name: p, baseModel: m, endpoints: ["localhost:18001"] }]
`);
    const resolved = await resolveConfigHosts(config, "x.yaml");
    expect(resolved.gateway.host).toBe("127.0.0.1");
    expect(resolved.aggregator.host).toBe("::1");
    expect(resolved.pools[0].endpoints).toEqual(["localhost:18001"]);
    expect(config.gateway.host).toBe("localhost"); // the input is not modified
  });

  it("names each field whose host does not resolve", async () => {
    const err = await resolveConfigHosts(withHosts("no-such-host.invalid", "also-missing.invalid"), "gw.yaml").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).issues).toEqual([
      'gateway.host: cannot resolve "no-such-host.invalid"',
      'aggregator.host: cannot resolve "also-missing.invalid"',
    ]);
    expect((err as ConfigError).message).toMatch(/^gw\.yaml: invalid gateway config:\n {2}gateway\.host: cannot resolve "no-such-host\.invalid"/);
    await expect(resolveConfigHosts(withHosts("127.0.0.1", "no-such-host.invalid"))).rejects.toThrow(
      /^<config>: invalid gateway config:\n {2}aggregator\.host: cannot resolve "no-such-host\.invalid"$/,
    );
  });
});

/** What each worker may hold by default. */
const DEFAULT_QUEUE = { maxBytesPerWorker: 64 * 1024 * 1024, maxRequestsPerWorker: 4096 };

describe("traffic config: profiles, models, classes", () => {
  const TWO_POOLS = `
pools:
  - name: llama
    baseModel: llama-3.1-8b
    adapters: [sql-lora]
    endpoints: ["127.0.0.1:18001"]
  - name: qwen
    baseModel: qwen3-32b
    endpoints: ["127.0.0.1:18002"]
`;
  const JWT = `\ngateway: { jwt: { issuer: "https://auth.test", jwksFile: jwks.json } }\n`;

  it("always has the two built-in profiles, from BUILTIN_PROFILES, and no models or gates by default", () => {
    const c = parseGatewayConfig(MINIMAL);
    expect(c.profiles).toEqual({ latency: BUILTIN_PROFILES.latency, throughput: BUILTIN_PROFILES.throughput });
    expect(c.profiles.latency.weights).toEqual(DEFAULT_WEIGHTS);
    // maxRetryAfterS 60: the OpenAI SDKs ignore a longer Retry-After.
    // Wait budgets: a chat user's patience, Critical longest, Sheddable shed first.
    expect(c.profiles.latency.admission).toEqual({
      enabled: true, maxWaiting: 1, maxKvCache: 0.95, sheddableFactor: 0.5, criticalFactor: 2, maxRetryAfterS: 59,
      waitCriticalMs: 60_000, waitStandardMs: 30_000, waitSheddableMs: 10_000,
    });
    expect(c.profiles.latency.deadlines).toEqual({ firstByteMs: 20_000, promptMsPerKToken: 500, outputMsPerToken: 100, assumedOutputTokens: 2048, streamIdleMs: 90_000 });
    expect(c.profiles.throughput).toEqual({
      weights: { queue: 1, kvCache: 1, running: 0, lora: 4, prefix: 6 },
      admission: {
        enabled: true, maxWaiting: 32, maxKvCache: 0.98, sheddableFactor: 0.5, criticalFactor: 2, maxRetryAfterS: 59,
        waitCriticalMs: 300_000, waitStandardMs: 180_000, waitSheddableMs: 60_000,
      },
      deadlines: { firstByteMs: 300_000, promptMsPerKToken: 1000, outputMsPerToken: 200, assumedOutputTokens: 4096, streamIdleMs: 300_000 },
    });
    expect(c.models).toEqual([]);
    expect(c.traffic).toEqual({ critical: "none", debug: "off", tenant: "none", queue: DEFAULT_QUEUE });
  });

  it("overrides a built-in field by field; a new profile starts from latency as the file leaves it", () => {
    const c = parseGatewayConfig(`${MINIMAL}
profiles:
  batch: { admission: { maxRetryAfterS: 300 }, deadlines: { assumedOutputTokens: 8192 } }
  latency: { weights: { prefix: 0 }, admission: { maxWaiting: 6 }, deadlines: { firstByteMs: 5000, streamIdleMs: 30000 } }
  throughput: { admission: { enabled: false }, deadlines: { outputMsPerToken: 50 } }
`);
    expect(c.profiles.latency).toEqual({
      weights: { ...DEFAULT_WEIGHTS, prefix: 0 },
      admission: { ...BUILTIN_PROFILES.latency.admission, maxWaiting: 6 },
      deadlines: { ...BUILTIN_PROFILES.latency.deadlines, firstByteMs: 5000, streamIdleMs: 30_000 },
    });
    expect(c.profiles.throughput).toEqual({
      ...BUILTIN_PROFILES.throughput,
      admission: { ...BUILTIN_PROFILES.throughput.admission, enabled: false },
      deadlines: { ...BUILTIN_PROFILES.throughput.deadlines, outputMsPerToken: 50 },
    });
    expect(c.profiles.batch).toEqual({
      weights: { ...DEFAULT_WEIGHTS, prefix: 0 },
      admission: { ...BUILTIN_PROFILES.latency.admission, maxWaiting: 6, maxRetryAfterS: 300 },
      deadlines: { ...BUILTIN_PROFILES.latency.deadlines, firstByteMs: 5000, streamIdleMs: 30_000, assumedOutputTokens: 8192 },
    });
  });

  it("gives a pool its profile's weights, with the pool's own weights over them field by field", () => {
    const c = parseGatewayConfig(`
pools:
  - { name: a, baseModel: ma, endpoints: ["127.0.0.1:1"] }
  - { name: b, baseModel: mb, profile: throughput, endpoints: ["127.0.0.1:2"] }
  - { name: c, baseModel: mc, profile: throughput, weights: { queue: 3 }, endpoints: ["127.0.0.1:3"] }
`);
    expect(c.pools.map((p) => [p.profile, p.weights, p.weightOverrides])).toEqual([
      ["latency", DEFAULT_WEIGHTS, {}],
      ["throughput", BUILTIN_PROFILES.throughput.weights, {}],
      ["throughput", { ...BUILTIN_PROFILES.throughput.weights, queue: 3 }, { queue: 3 }],
    ]);
  });

  it("reads models: served names, virtual names with a split, routes; priority defaults to standard, burst to the rate", () => {
    const c = parseGatewayConfig(`${TWO_POOLS}
models:
  - { name: sql-lora, profile: throughput, priority: sheddable }
  - name: chat
    priority: critical
    split: [{ model: llama-3.1-8b, weight: 90 }, { model: qwen3-32b, weight: 10 }]
    route: { timeoutMs: 30000 }
  - name: llama-3.1-8b
    split: [{ model: llama-3.1-8b, weight: 9 }, { model: sql-lora, weight: 1 }]
    route: { rateLimit: { requestsPerS: 5 } }
`);
    expect(c.models).toEqual([
      { name: "sql-lora", profile: "throughput", priority: "sheddable" },
      {
        name: "chat",
        priority: "critical",
        split: [{ model: "llama-3.1-8b", weight: 90 }, { model: "qwen3-32b", weight: 10 }],
        route: { timeoutMs: 30000 },
      },
      {
        name: "llama-3.1-8b",
        priority: "standard",
        split: [{ model: "llama-3.1-8b", weight: 9 }, { model: "sql-lora", weight: 1 }],
        route: { rateLimit: { requestsPerS: 5, burst: 5 } },
      },
    ]);
  });

  it("names the field of a bad profile", () => {
    expect(issues(`${MINIMAL}
profiles:
  latency: { admission: { maxWaiting: 0, maxKvCache: 1.5, sheddableFactor: 0, criticalFactor: 0.5, maxRetryAfterS: 1.5 } }
  throughput: { admission: { maxRetryAfterS: 3601, enabled: "yes" }, weights: { lora: -1 } }
  "bad name": {}
  x: { weigths: {} }
`)).toEqual([
      "profiles.latency.admission.maxWaiting: expected a number > 0",
      "profiles.latency.admission.maxKvCache: expected a number in (0, 1]",
      "profiles.latency.admission.sheddableFactor: expected a number in (0, 1]",
      "profiles.latency.admission.criticalFactor: expected a number >= 1",
      "profiles.latency.admission.maxRetryAfterS: expected an integer 1..3600",
      "profiles.throughput.weights.lora: expected a number >= 0",
      "profiles.throughput.admission.enabled: expected true or false",
      "profiles.throughput.admission.maxRetryAfterS: expected an integer 1..3600",
      'profiles.x: unknown field "weigths"',
    ]);
    expect(issues(`${MINIMAL}
profiles:
  latency: { deadlines: { firstByteMs: 0, promptMsPerKToken: 0.5, outputMsPerToken: "100", assumedOutputTokens: 1000001, streamIdleMs: 3600001 } }
  throughput: { deadlines: { firstByteMs: 3600000, streamIdle: 1 } }
`)).toEqual([
      "profiles.latency.deadlines.firstByteMs: expected an integer 1..3600000",
      "profiles.latency.deadlines.promptMsPerKToken: expected an integer 1..3600000",
      "profiles.latency.deadlines.outputMsPerToken: expected an integer 1..3600000",
      "profiles.latency.deadlines.assumedOutputTokens: expected an integer 1..1000000",
      "profiles.latency.deadlines.streamIdleMs: expected an integer 1..3600000",
      'profiles.throughput.deadlines: unknown field "streamIdle"',
    ]);
    expect(issues(`${MINIMAL}\nprofiles:\n  "bad name": {}\n`)).toEqual([
      "profiles.bad name: expected a non-empty name of letters, digits and . _ - : / (no spaces)",
    ]);
    expect(issues(`${MINIMAL.replace("engine: vllm", "engine: vllm\n    profile: chat")}`)).toEqual([
      'pools[0].profile: unknown profile "chat" (profiles: latency, throughput)',
    ]);
  });

  it("names the field of a bad model entry", () => {
    const bad = (models: string, extra = "") => issues(`${TWO_POOLS}${extra}\nmodels:\n${models}`);
    expect(bad("  - { name: gpt-99 }\n")).toEqual([
      'models[0].name: unknown model "gpt-99": not a pool\'s baseModel or adapter, and no split to make it a virtual name',
    ]);
    expect(bad("  - { name: sql-lora, profile: batch, priority: urgent }\n")).toEqual([
      "models[0].priority: expected one of critical, standard, sheddable",
    ]);
    expect(bad("  - { name: sql-lora, profile: batch }\n  - { name: sql-lora }\n", "\nprofiles: { chat: {} }")).toEqual([
      'models[0].profile: unknown profile "batch" (profiles: latency, throughput, chat)',
      'models[1].name: model "sql-lora" is listed twice (also models[0])',
    ]);
    expect(bad("  - { name: chat, split: [] }\n  - { name: x, split: [{ model: sql-lora, weight: 0 }, { model: qwen3-32b, weight: 1.5 }, { model: qwen3-32b }] }\n")).toEqual([
      "models[0].split: expected at least one target",
      "models[1].split[0].weight: expected an integer 1..1000000",
      "models[1].split[1].weight: expected an integer 1..1000000",
      "models[1].split[2].weight: is required",
    ]);
    expect(bad("  - { name: chat, split: [{ model: canary, weight: 1 }] }\n  - { name: canary, split: [{ model: sql-lora, weight: 1 }, { model: sql-lora, weight: 2 }] }\n")).toEqual([
      'models[0].split[0].model: "canary" is not served by any pool (a split target must be a pool\'s baseModel or adapter)',
      'models[1].split[1].model: "sql-lora" is already a target (split[0])',
    ]);
    expect(bad("  - { name: sql-lora, route: {} }\n  - { name: qwen3-32b, route: { timeoutMs: 0, rateLimit: { requestsPerS: 2, burst: 1 } } }\n")).toEqual([
      "models[0].route: expected timeoutMs or rateLimit",
      "models[1].route.timeoutMs: expected an integer > 0",
    ]);
    expect(bad("  - { name: qwen3-32b, route: { rateLimit: { requestsPerS: 2, burst: 1 } } }\n")).toEqual([
      "models[0].route.rateLimit.burst: must be >= requestsPerS (2), or the bucket caps the rate below it",
    ]);
    expect(bad("  - { name: chat, split: [{ model: sql-lora, weight: 1 }, { model: qwen3-32b, weight: 1 }], route: { rateLimit: { requestsPerS: 2 } } }\n")).toEqual([
      "models[0].route.rateLimit: the split lands in several pools (llama, qwen); a rate limit needs all targets in one pool",
    ]);
  });

  it("reads gateway.jwt: exp required, 60 s skew, no query token, the system CA, and exactly one key source", () => {
    const jwt = parseGatewayConfig(`${MINIMAL}${JWT}`, "/etc/gw/config.yaml").gateway.jwt!;
    expect(jwt).toMatchObject({ requireExpiration: true, clockSkewSeconds: 60, allowQueryToken: false, jwksCacheDurationS: 300, jwksCaFile: "/etc/ssl/certs/ca-certificates.crt" });
    const remote = (extra: string) => `${MINIMAL}\ngateway: { jwt: { issuer: "https://auth.test"${extra} } }\n`;
    expect(parseGatewayConfig(remote(", jwksUri: https://idp.test/keys")).gateway.jwt?.jwksUri).toBe("https://idp.test/keys");
    expect(issues(remote(""))).toEqual(["gateway.jwt.jwksFile: expected exactly one of jwksFile and jwksUri"]);
    expect(issues(remote(", jwksFile: a.json, jwksUri: https://idp.test/keys"))).toEqual(["gateway.jwt.jwksFile: expected exactly one of jwksFile and jwksUri"]);
    expect(issues(remote(", jwksUri: http://idp.test/keys"))).toEqual(["gateway.jwt.jwksUri: expected an https:// URL of a JWKS"]);
  });

  it("reads gateway.accessLog (Envoy's stdout without a path) and gateway.tracing (1% sampled by default), refusing bad fields", () => {
    const c = parseGatewayConfig(`${MINIMAL}\ngateway: { accessLog: {}, tracing: { host: otel.observability, port: 4317 } }\n`);
    expect(c.gateway.accessLog).toEqual({});
    expect(c.gateway.tracing).toEqual({ host: "otel.observability", port: 4317, serviceName: "llm-gateway", samplingPercent: 1 });
    expect(parseGatewayConfig(MINIMAL).gateway).not.toHaveProperty("tracing");
    expect(issues(`${MINIMAL}\ngateway: { accessLog: { path: logs/a.log }, tracing: { host: otel, port: 0, samplingPercent: 101 } }\n`)).toEqual([
      "gateway.accessLog.path: expected an absolute file path",
      "gateway.tracing.port: expected a port 1..65535",
      "gateway.tracing.samplingPercent: expected a number 0..100",
    ]);
  });

  it("reads the traffic gates, and a claim gate only with gateway.jwt", () => {
    const gated = parseGatewayConfig(`${MINIMAL}${JWT}traffic: { critical: { claim: tier, values: [gold, platinum] }, debug: all }\n`);
    expect(gated.traffic).toEqual({ critical: { claim: "tier", values: ["gold", "platinum"] }, debug: "all", tenant: "none", queue: DEFAULT_QUEUE });
    expect(parseGatewayConfig(`${MINIMAL}traffic: { critical: any, debug: off }\n`).traffic).toEqual({
      critical: "any", debug: "off", tenant: "none", queue: DEFAULT_QUEUE,
    });
    expect(issues(`${MINIMAL}traffic: { critical: { claim: tier, values: [gold] }, debug: { claim: roles, values: [ops] } }\n`)).toEqual([
      "traffic.critical: a claim gate needs gateway.jwt (claims are only trusted from verified tokens)",
      "traffic.debug: a claim gate needs gateway.jwt (claims are only trusted from verified tokens)",
    ]);
    expect(issues(`${MINIMAL}${JWT}traffic: { critical: all, debug: none }\n`)).toEqual([
      "traffic.critical: expected any or none, or { claim, values }",
      "traffic.debug: expected all or off, or { claim, values }",
    ]);
    expect(issues(`${MINIMAL}${JWT}traffic: { critical: { claim: "a b", values: [] }, debug: { claim: x, values: ["a,b"], role: y } }\n`)).toEqual([
      "traffic.critical.claim: expected a JWT claim name (nested claims as a.b)",
      "traffic.critical.values: expected a non-empty list of claim values (strings without commas)",
      "traffic.debug.values: expected a non-empty list of claim values (strings without commas)",
      'traffic.debug: unknown field "role"',
    ]);
  });

  it("reads where a tenant comes from and each worker's hold bounds; a tenant claim only with gateway.jwt", () => {
    expect(parseGatewayConfig(`${MINIMAL}traffic: { tenant: header }\n`).traffic.tenant).toBe("header");
    expect(parseGatewayConfig(`${MINIMAL}${JWT}traffic: { tenant: { claim: sub } }\n`).traffic.tenant).toEqual({ claim: "sub" });
    expect(parseGatewayConfig(`${MINIMAL}traffic: { queue: { maxBytesPerWorker: 1048576 } }\n`).traffic.queue).toEqual({
      maxBytesPerWorker: 1_048_576, maxRequestsPerWorker: 4096,
    });
    expect(issues(`${MINIMAL}traffic: { tenant: { claim: sub } }\n`)).toEqual([
      "traffic.tenant: a claim gate needs gateway.jwt (claims are only trusted from verified tokens)",
    ]);
    expect(issues(`${MINIMAL}traffic: { tenant: everyone, queue: { maxRequestsPerWorker: -1 } }\n`)).toEqual([
      "traffic.tenant: expected none, header or { claim }",
      expect.stringContaining("traffic.queue.maxRequestsPerWorker"),
    ]);
    expect(issues(`${MINIMAL}profiles: { latency: { admission: { waitStandardMs: 1.5, waitCriticalMs: 600000 } } }\n`)).toEqual([
      "profiles.latency.admission.waitCriticalMs: expected an integer 0..599000 (ms; 0 refuses at once; a held stream is silent, and Envoy cuts one silent for 600 s)",
      "profiles.latency.admission.waitStandardMs: expected an integer 0..599000 (ms; 0 refuses at once; a held stream is silent, and Envoy cuts one silent for 600 s)",
    ]);
  });

  it("parses config/traffic-example.yaml, docs/traffic.md's complete example", () => {
    const c = loadGatewayConfig(fileURLToPath(new URL("../../config/traffic-example.yaml", import.meta.url)));
    expect(c.pools.map((p) => [p.name, p.profile])).toEqual([["llama", "latency"], ["qwen", "throughput"]]);
    expect(Object.keys(c.profiles)).toEqual(["latency", "throughput", "nightly"]);
    expect(c.profiles.nightly.admission).toMatchObject({ maxWaiting: 64, maxRetryAfterS: 600, maxKvCache: 0.95 });
    expect(c.models.map((m) => [m.name, m.priority, m.split?.length ?? 0, m.route ?? null])).toEqual([
      ["llama-3.1-8b", "standard", 0, { timeoutMs: 120000 }],
      ["summarise-lora", "sheddable", 0, { rateLimit: { requestsPerS: 20, burst: 40 } }],
      ["sql-lora", "standard", 2, null],
      ["assistant", "critical", 2, null],
      ["qwen3-32b", "standard", 0, null],
    ]);
    expect(c.traffic).toEqual({
      critical: { claim: "tier", values: ["gold", "platinum"] }, debug: { claim: "team", values: ["sre"] }, tenant: "none", queue: DEFAULT_QUEUE,
    });
  });
});

describe("kubernetes pools: pods discovered by label selector", () => {
  const kubePool = (kubernetes: string, rest = "") => `
pools:
  - { name: llama, baseModel: llama-3.1-8b, kubernetes: ${kubernetes}${rest} }
`;

  it("takes the selector as matchLabels or as a selector string; such a pool has no endpoints", () => {
    const c = parseGatewayConfig(kubePool(`{ namespace: models, selector: { matchLabels: { app: vllm, "example.com/pool": llama } }, port: 8000 }`));
    expect(c.pools[0].endpoints).toEqual([]);
    expect(c.pools[0].kubernetes).toEqual({ namespace: "models", selector: "app=vllm,example.com/pool=llama", port: 8000 });
    const s = parseGatewayConfig(kubePool(`{ namespace: models, selector: " app=vllm, tier in (a, b), !canary, rev!=" , port: 8000 }`));
    expect(s.pools[0].kubernetes?.selector).toBe("app=vllm, tier in (a, b), !canary, rev!=");
    // Static pools are as they were.
    expect(parseGatewayConfig(MINIMAL).pools[0].kubernetes).toBeUndefined();
  });

  it("wants exactly one of endpoints and kubernetes", () => {
    expect(issues(kubePool(`{ namespace: models, selector: "app=vllm", port: 8000 }`, `, endpoints: ["10.0.0.1:8000"]`))).toEqual([
      "pools[0].kubernetes: a pool takes its pods from endpoints or from kubernetes, not both",
    ]);
    expect(issues(`pools: [{ name: llama, baseModel: m }]`)).toEqual([
      "pools[0].endpoints: is required (or kubernetes: { namespace, selector, port } to discover the pool's pods by label)",
    ]);
  });

  it("names each bad field of the kubernetes block", () => {
    expect(issues(kubePool(`{ namespace: Models, selector: { matchLabels: { app: 2, "bad key": x, ok: "" } }, port: 0, watch: true }`))).toEqual([
      "pools[0].kubernetes.namespace: expected a namespace name (lower-case letters, digits and -, 63 characters at most)",
      "pools[0].kubernetes.selector.matchLabels.app: expected a label value (a string of letters, digits, - _ . ; 63 characters at most; quote numbers and booleans)",
      "pools[0].kubernetes.selector.matchLabels.bad key: expected a label name ([prefix/]name: letters, digits, - _ . ; 63 characters at most)",
      "pools[0].kubernetes.port: expected an integer port 1..65535",
      'pools[0].kubernetes: unknown field "watch"',
    ]);
    expect(issues(kubePool(`{ selector: "app=vllm" }`))).toEqual(["pools[0].kubernetes.namespace: is required", "pools[0].kubernetes.port: is required"]);
    const selector = (s: string) => issues(kubePool(`{ namespace: models, selector: ${s}, port: 8000 }`));
    expect(selector(`"app in (a"`)).toEqual(['pools[0].kubernetes.selector: expected a label selector such as "app=vllm,tier in (a,b)"; cannot read "app in (a"']);
    expect(selector(`"app=vllm,,x=y"`)).toEqual(['pools[0].kubernetes.selector: expected a label selector such as "app=vllm,tier in (a,b)"; cannot read ""']);
    // An empty selector would select every pod in the namespace.
    expect(selector(`"  "`)).toEqual(["pools[0].kubernetes.selector: expected a non-empty label selector (an empty one selects every pod in the namespace)"]);
    expect(selector(`{ matchLabels: {} }`)).toEqual([
      "pools[0].kubernetes.selector.matchLabels: expected a non-empty mapping of label: value (an empty selector selects every pod in the namespace)",
    ]);
    expect(selector(`{ matchLabel: { app: vllm } }`)).toEqual([
      'pools[0].kubernetes.selector: unknown field "matchLabel" (expected { matchLabels: { label: value, ... } } or a selector string such as "app=vllm")',
    ]);
    expect(selector(`[app=vllm]`)).toEqual(['pools[0].kubernetes.selector: expected { matchLabels: { label: value, ... } } or a selector string such as "app=vllm"']);
    expect(issues(kubePool(`{ namespace: models, port: 8000 }`))).toEqual(["pools[0].kubernetes.selector: is required"]);
  });


  it("resolves a kubeconfig path against the config file's folder", () => {
    const dir = mkdtempSync(join(tmpdir(), "gw-config-"));
    try {
      const file = join(dir, "gw.yaml");
      writeFileSync(file, kubePool(`{ namespace: models, selector: "app=vllm", port: 8000, kubeconfig: creds/kubeconfig }`));
      expect(loadGatewayConfig(file).pools[0].kubernetes?.kubeconfig).toBe(join(dir, "creds/kubeconfig"));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
