import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { ConfigError, loadGatewayConfig, parseEndpoint, parseGatewayConfig, resolveConfigHosts } from "../host/config.js";

const LOCAL_YAML = fileURLToPath(new URL("../config/local.yaml", import.meta.url));

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
      passiveHealth: { ejectAfterFailures: 3, ejectMs: 10000 },
    });
    expect(c.aggregator).toEqual({
      host: "127.0.0.1", port: 50051, metricsPort: 9464, scrapeIntervalMs: 50, scrapeTimeoutMs: 1000, staleAfterMs: 1000, heartbeatMs: 1000,
    });
    expect(c.pools[0]).toEqual({
      name: "llama",
      baseModel: "llama-3.1-8b",
      engine: "vllm",
      adapters: [],
      weights: { queue: 2, kvCache: 1, running: 1, lora: 2, prefix: 4 },
      endpoints: ["127.0.0.1:18001"],
    });
    expect(c.localFleet).toBeUndefined();
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
    expect(c.localFleet?.pods.map((p) => [p.name, p.pool, p.port, p.speed, p.engine])).toEqual([
      ["llama-a", "llama", 18001, 1.0, "vllm"],
      ["llama-b", "llama", 18002, 0.5, "vllm"],
      ["qwen-a", "qwen", 18003, 1.0, "vllm"],
      ["qwen-b", "qwen", 18004, 1.0, "vllm"],
    ]);
  });

  it("gives a local pod its pool's engine when it names none", () => {
    const c = parseGatewayConfig(`${MINIMAL.replace("vllm", "sglang")}\nlocalFleet: { pods: [ { name: a, pool: llama, port: 18001 } ] }\n`);
    expect(c.localFleet?.pods[0]).toEqual({ name: "a", pool: "llama", port: 18001, speed: 1, engine: "sglang" });
  });

  it("names the field of a bad value", () => {
    expect(issues(twoPools(`{ name: qwen, baseModel: q, engine: vllm, endpoints: ["127.0.0.1:1"], weights: { queue: -1 } }`))).toEqual([
      "pools[1].weights.queue: expected a number >= 0",
    ]);
    expect(issues(twoPools(`{ name: qwen, baseModel: q, engine: llamacpp, endpoints: ["127.0.0.1:1"] }`))).toEqual([
      "pools[1].engine: expected one of vllm, sglang, tgi",
    ]);
    expect(issues(twoPools(`{ name: qwen, engine: vllm, endpoints: ["127.0.0.1:1"] }`))).toEqual(["pools[1].baseModel: is required"]);
    expect(issues(`${MINIMAL}\ngateway: { port: 70000, maxBodyBytes: 1.5 }\n`)).toEqual([
      "gateway.port: expected an integer port 0..65535",
      "gateway.maxBodyBytes: expected an integer > 0",
    ]);
    expect(issues(`${MINIMAL}\naggregator: { scrapeIntervalMs: "fast" }\n`)).toEqual(["aggregator.scrapeIntervalMs: expected an integer > 0"]);
    expect(issues("pools: []")).toEqual(["pools: expected at least one pool"]);
    expect(issues("gateway: {}")).toEqual(["pools: is required"]);
    expect(issues(`${MINIMAL}\napiVersion: v2\n`)).toEqual(['apiVersion: expected "llm-gateway/v1"']);
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

  it("requires unique pool names and unique model names across pools", () => {
    expect(issues(twoPools(`{ name: llama, baseModel: other, engine: vllm, endpoints: ["127.0.0.1:1"] }`))).toEqual([
      'pools[1].name: duplicate pool name "llama" (also pools[0])',
    ]);
    expect(issues(twoPools(`{ name: qwen, baseModel: sql-lora, engine: vllm, adapters: [llama-3.1-8b], endpoints: ["127.0.0.1:1"] }`))).toEqual([
      'pools[1].baseModel: model name "sql-lora" is already used by pools[0].adapters[0]',
      'pools[1].adapters[0]: model name "llama-3.1-8b" is already used by pools[0].baseModel',
    ]);
  });

  it("checks that local pods reference existing pools and their endpoints", () => {
    const fleet = (pods: string) => `${MINIMAL}\nlocalFleet:\n  pods:\n${pods}`;
    expect(issues(fleet("    - { name: a, pool: qwen, port: 18001 }\n"))).toEqual(['localFleet.pods[0].pool: unknown pool "qwen" (pools: llama)']);
    expect(issues(fleet("    - { name: a, pool: llama, port: 18001 }\n    - { name: a, pool: llama, port: 18002, speed: 0 }\n"))).toEqual([
      "localFleet.pods[1].speed: expected a number > 0",
    ]);
    expect(issues(fleet("    - { name: a, pool: llama, port: 18001 }\n    - { name: a, pool: llama, port: 18002 }\n"))).toEqual([
      'localFleet.pods[1].name: duplicate pod name "a" (also pods[0])',
      'localFleet.pods[1].port: no endpoint of pool "llama" (pools[0].endpoints) uses port 18002',
    ]);
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
    const c = parseGatewayConfig(`${MINIMAL}\ngateway: { host: "::1" }\naggregator: { host: gw.internal }\n`);
    expect([c.gateway.host, c.aggregator.host]).toEqual(["::1", "gw.internal"]);
  });
});

describe("resolveConfigHosts", () => {
  const withHosts = (gateway: string, aggregator: string) =>
    parseGatewayConfig(`${MINIMAL}\ngateway: { host: "${gateway}" }\naggregator: { host: "${aggregator}" }\n`);

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
