// The aggregator's ADS server (host/aggregator/xds.ts): the state-of-the-world
// protocol against a gRPC client playing Envoy, then a real Envoy whose pool
// clusters follow the endpoint sets without a restart, then the aggregator
// pushing a DNS name's new address.
import * as grpc from "@grpc/grpc-js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { startAggregator } from "../host/aggregator/index.js";
import { startSnapshotServer, type SnapshotServer } from "../host/aggregator/push.js";
import {
  CLUSTER_LOAD_ASSIGNMENT_TYPE as CLA,
  createEndpointDiscovery,
  poolClusterName,
  type DiscoveryRequest,
  type EndpointDiscovery,
} from "../host/aggregator/xds.js";
import { parseGatewayConfig } from "../host/config.js";
import { renderEnvoyConfig, startEnvoy, type EnvoyProcess } from "../host/envoy/index.js";
import { filterWasmPath } from "../host/paths.js";
import { stablePort, waitFor } from "./helpers/stack.js";

interface Assignment {
  "@type": string;
  cluster_name: string;
  endpoints?: Array<{ lb_endpoints?: Array<{ endpoint: { address: { socket_address: { address: string; port_value: number } } } }> }>;
}
interface Response {
  version_info: string;
  type_url: string;
  nonce: string;
  resources: Assignment[];
}

/** "ip:port" per cluster name, from a response. */
function hostsOf(r: Response): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const a of r.resources) {
    expect(a["@type"]).toBe(CLA);
    out[a.cluster_name] = (a.endpoints ?? []).flatMap((l) =>
      (l.lb_endpoints ?? []).map((e) => `${e.endpoint.address.socket_address.address}:${e.endpoint.address.socket_address.port_value}`));
  }
  return out;
}

/** One ADS stream, as Envoy would hold it. */
class FakeEnvoy {
  private readonly client: grpc.Client;
  private readonly call: grpc.ClientDuplexStream<DiscoveryRequest, Response>;
  private readonly queue: Response[] = [];
  private waiter: (() => void) | null = null;
  ended = false;

  constructor(definition: grpc.ServiceDefinition, address: string) {
    const Client = grpc.makeGenericClientConstructor(definition, "AggregatedDiscoveryService");
    this.client = new Client(address, grpc.credentials.createInsecure());
    this.call = (this.client as unknown as { StreamAggregatedResources(): FakeEnvoy["call"] }).StreamAggregatedResources();
    this.call.on("data", (r: Response) => {
      this.queue.push(r);
      this.waiter?.();
    });
    this.call.on("error", () => {}); // a cancelled stream at close
    this.call.on("end", () => (this.ended = true));
  }

  send(req: DiscoveryRequest): void {
    this.call.write({ type_url: CLA, ...req });
  }

  /** The next response, failing after `ms`. */
  async next(ms = 3_000): Promise<Response> {
    const deadline = Date.now() + ms;
    while (this.queue.length === 0) {
      if (Date.now() > deadline) throw new Error("no response");
      await new Promise<void>((r) => {
        this.waiter = r;
        setTimeout(r, 20);
      });
    }
    return this.queue.shift()!;
  }

  /** Fails if a response arrives within `ms`. */
  async nothingFor(ms = 300): Promise<void> {
    await new Promise((r) => setTimeout(r, ms));
    expect(this.queue).toEqual([]);
  }

  close(): void {
    this.call.cancel();
    this.client.close();
  }
}

const snapshot = { version: 1, models: [], pools: [], generatedUnixMs: 0 };

describe("ADS protocol", () => {
  let discovery: EndpointDiscovery;
  let server: SnapshotServer;
  const logs: string[] = [];
  const envoys: FakeEnvoy[] = [];
  const connect = () => {
    const e = new FakeEnvoy(discovery.service.definition, `127.0.0.1:${server.port}`);
    envoys.push(e);
    return e;
  };
  const [A, B, C] = ["a", "b:c/d", "e"].map(poolClusterName);

  beforeAll(async () => {
    discovery = createEndpointDiscovery({ log: (l) => logs.push(l) });
    server = await startSnapshotServer({ host: "127.0.0.1", port: 0, current: () => snapshot, log: () => {}, services: [discovery.service] });
  });
  afterEach(() => {
    for (const e of envoys.splice(0)) e.close();
  });
  afterAll(async () => {
    discovery.close();
    await server.close();
  });

  it("answers a subscription with the subscribed pools only, sorted, with a version and a nonce", async () => {
    discovery.update(new Map([
      ["a", ["127.0.0.1:9002", "127.0.0.1:9001"]],
      ["b:c/d", ["[::1]:9003"]],
      ["e", []],
    ]));
    const envoy = connect();
    envoy.send({ node: { id: "envoy-1" }, resource_names: [A, B] });
    const r = await envoy.next();
    expect(r.type_url).toBe(CLA);
    expect(r.version_info).toBe(String(discovery.version()));
    expect(r.nonce).not.toBe("");
    expect(hostsOf(r)).toEqual({ [A]: ["127.0.0.1:9001", "127.0.0.1:9002"], [B]: ["::1:9003"] });
    expect(discovery.streams()).toBe(1);
    expect(logs.some((l) => l.includes("opened by envoy-1@"))).toBe(true);
  });

  it("sends nothing for an ACK, and pushes a change only to the streams subscribed to that pool", async () => {
    const onA = connect();
    const onE = connect();
    onA.send({ resource_names: [A, B] });
    onE.send({ resource_names: [C] });
    const first = await onA.next();
    const firstE = await onE.next();
    onA.send({ resource_names: [A, B], version_info: first.version_info, response_nonce: first.nonce });
    onE.send({ resource_names: [C], version_info: firstE.version_info, response_nonce: firstE.nonce });
    await onA.nothingFor();

    discovery.update(new Map([["a", ["127.0.0.1:9001"]]]));
    const pushed = await onA.next();
    expect(Number(pushed.version_info)).toBe(Number(first.version_info) + 1);
    expect(pushed.nonce).not.toBe(first.nonce);
    // The whole subscription, not just the pool that changed.
    expect(hostsOf(pushed)).toEqual({ [A]: ["127.0.0.1:9001"], [B]: ["::1:9003"] });
    await onE.nothingFor();

    // The same set again is no change: no new version, no push.
    const version = discovery.version();
    discovery.update(new Map([["a", ["127.0.0.1:9001", "127.0.0.1:9001"]]]));
    expect(discovery.version()).toBe(version);
    await onA.nothingFor();
  });

  it("ignores a stale nonce, does not resend a rejected version, and answers a new subscription", async () => {
    const envoy = connect();
    envoy.send({ resource_names: [A] });
    const r1 = await envoy.next();
    discovery.update(new Map([["a", ["127.0.0.1:9005"]]]));
    const r2 = await envoy.next();

    // The ACK of r1 crossed r2 on the wire: stale, even though it asks for more.
    envoy.send({ resource_names: [A, C], version_info: r1.version_info, response_nonce: r1.nonce });
    await envoy.nothingFor();

    envoy.send({
      resource_names: [A],
      version_info: r1.version_info,
      response_nonce: r2.nonce,
      error_detail: { code: 3, message: "bad endpoint" },
    });
    await envoy.nothingFor();
    expect(logs.some((l) => l.includes(`rejected version ${r2.version_info}: bad endpoint`))).toBe(true);

    envoy.send({ resource_names: [A, C], version_info: r1.version_info, response_nonce: r2.nonce });
    const r3 = await envoy.next();
    expect(hostsOf(r3)).toEqual({ [A]: ["127.0.0.1:9005"], [C]: [] });
  });

  it("leaves out names that are no pool, and ignores other resource types", async () => {
    const envoy = connect();
    envoy.send({ resource_names: [A, "llm_gateway_pool_ghost"] });
    expect(Object.keys(hostsOf(await envoy.next()))).toEqual([A]);
    expect(logs.some((l) => l.includes("asks for llm_gateway_pool_ghost, which is no pool here"))).toBe(true);

    const other = connect();
    other.send({ type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster", resource_names: [] });
    await other.nothingFor();
  });

  it("refuses an endpoint that is not an ip:port literal", () => {
    expect(() => discovery.update(new Map([["a", ["pod-0:8000"]]]))).toThrow(/not an ip:port literal/);
    expect(() => discovery.update(new Map([["a", ["127.0.0.1"]]]))).toThrow(/not an ip:port literal/);
  });

  it("forgets a stream Envoy drops, and ends the rest at close", async () => {
    const dropped = connect();
    const kept = new FakeEnvoy(discovery.service.definition, `127.0.0.1:${server.port}`);
    dropped.send({ resource_names: [A] });
    kept.send({ resource_names: [A] });
    await dropped.next();
    await kept.next();
    const open = discovery.streams();
    dropped.close();
    await waitFor("the dropped stream to be forgotten", () => discovery.streams() === open - 1);

    const other = createEndpointDiscovery({ log: () => {} });
    const otherServer = await startSnapshotServer({ host: "127.0.0.1", port: 0, current: () => snapshot, log: () => {}, services: [other.service] });
    const envoy = new FakeEnvoy(other.service.definition, `127.0.0.1:${otherServer.port}`);
    try {
      envoy.send({ resource_names: [] });
      await envoy.next();
      other.close();
      await waitFor("the stream to end", () => envoy.ended);
      expect(other.streams()).toBe(0);
    } finally {
      envoy.close();
      kept.close();
      await otherServer.close();
    }
  });
});

async function clusterHosts(envoy: EnvoyProcess): Promise<Record<string, string[]>> {
  const body = (await (await fetch(`${envoy.adminUrl}/clusters?format=json`)).json()) as {
    cluster_statuses: Array<{ name: string; host_statuses?: Array<{ address: { socket_address: { address: string; port_value: number } } }> }>;
  };
  const out: Record<string, string[]> = {};
  for (const c of body.cluster_statuses) {
    if (!c.name.startsWith("llm_gateway_pool_")) continue;
    out[c.name] = (c.host_statuses ?? []).map((h) => `${h.address.socket_address.address}:${h.address.socket_address.port_value}`).sort();
  }
  return out;
}

function gatewayYaml(aggregatorPort: number, wasmFilter = true): string {
  return renderEnvoyConfig({
    gatewayHost: "127.0.0.1",
    gatewayPort: 0,
    adminPort: 0,
    aggregatorHost: "127.0.0.1",
    aggregatorPort,
    wasmPath: filterWasmPath,
    maxBodyBytes: 1024 * 1024,
    pools: ["llama", "qwen"],
    wasmFilter,
  });
}

describe("a real Envoy", () => {
  let discovery: EndpointDiscovery;
  let server: SnapshotServer;
  let envoy: EnvoyProcess;
  const clusters = () => clusterHosts(envoy);

  beforeAll(async () => {
    discovery = createEndpointDiscovery({ log: () => {} });
    discovery.update(new Map([["llama", ["127.0.0.1:9101", "127.0.0.1:9102"]], ["qwen", []]]));
    server = await startSnapshotServer({ host: "127.0.0.1", port: 0, current: () => snapshot, log: () => {}, services: [discovery.service] });
    envoy = await startEnvoy({ configYaml: gatewayYaml(server.port), concurrency: 2 });
  });
  afterAll(async () => {
    await envoy?.stop();
    discovery?.close();
    await server?.close();
  });

  it("has each pool's hosts once it is ready (startup waits for the first assignment)", async () => {
    expect(await clusters()).toEqual({
      llm_gateway_pool_llama: ["127.0.0.1:9101", "127.0.0.1:9102"],
      llm_gateway_pool_qwen: [],
    });
    expect(discovery.streams()).toBe(1);
  });

  it("follows pods appearing and leaving without a restart", async () => {
    const pid = envoy.pid;
    discovery.update(new Map([["llama", ["127.0.0.1:9102", "127.0.0.1:9103"]], ["qwen", ["127.0.0.1:9201"]]]));
    await waitFor("Envoy to take the new sets", async () => {
      const hosts = await clusters();
      return hosts.llm_gateway_pool_llama.join() === "127.0.0.1:9102,127.0.0.1:9103" && hosts.llm_gateway_pool_qwen.join() === "127.0.0.1:9201";
    });
    discovery.update(new Map([["llama", []]]));
    await waitFor("the llama pool to empty", async () => (await clusters()).llm_gateway_pool_llama.length === 0);
    expect(envoy.pid).toBe(pid);
    // Every version was accepted: Envoy counts the updates and no rejection.
    const stats = await envoy.stats("cluster\\.llm_gateway_pool_llama\\.update_(success|rejected)$");
    expect(stats["cluster.llm_gateway_pool_llama.update_rejected"]).toBe(0);
    expect(stats["cluster.llm_gateway_pool_llama.update_success"]).toBeGreaterThanOrEqual(3);
  });
});

describe("an Envoy started before the aggregator", () => {
  let envoy: EnvoyProcess | undefined;
  let server: SnapshotServer | undefined;
  let discovery: EndpointDiscovery | undefined;
  afterAll(async () => {
    await envoy?.stop();
    discovery?.close();
    await server?.close();
  });

  it("serves JSON 503s after initial_fetch_timeout, then takes the pools when the aggregator comes up", async () => {
    const port = await stablePort();
    const started = Date.now();
    envoy = await startEnvoy({ configYaml: gatewayYaml(port, false), concurrency: 2 });
    const waited = Date.now() - started;
    expect(waited).toBeGreaterThan(4_000); // the 5 s initial_fetch_timeout, not Envoy's default 15 s
    expect(waited).toBeLessThan(12_000);
    const r = await fetch(`http://${envoy.listenerAddresses.llm_gateway}/v1/chat/completions`, { method: "POST", body: "{}" });
    expect(r.status).toBe(503);
    expect(((await r.json()) as { error: { type: string } }).error.type).toBe("server_error");
    expect(await clusterHosts(envoy)).toEqual({ llm_gateway_pool_llama: [], llm_gateway_pool_qwen: [] });

    discovery = createEndpointDiscovery({ log: () => {} });
    discovery.update(new Map([["llama", ["127.0.0.1:9401"]], ["qwen", []]]));
    server = await startSnapshotServer({ host: "127.0.0.1", port, current: () => snapshot, log: () => {}, services: [discovery.service] });
    await waitFor("Envoy to reconnect and take the pools", async () =>
      (await clusterHosts(envoy!)).llm_gateway_pool_llama.join() === "127.0.0.1:9401", 30_000);
  }, 60_000);
});

describe("the aggregator", () => {
  it("pushes a DNS name's new address to subscribed Envoys", async () => {
    let answer = "127.0.0.1";
    const config = parseGatewayConfig(
      stringify({
        gateway: { host: "127.0.0.1", port: 0, adminPort: 0 },
        // Nothing listens on the pod's port, so it is never fresh and its name is re-resolved every second.
        aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0, scrapeIntervalMs: 50, staleAfterMs: 200 },
        pools: [{ name: "llama", baseModel: "llama-3.1-8b", endpoints: ["pod-a.test:9301", "127.0.0.1:9302"] }],
      }),
      "dns test",
    );
    const aggregator = await startAggregator(config, {
      port: 0,
      metricsPort: 0,
      log: () => {},
      lookup: async () => [{ address: answer, family: 4 }],
    });
    const definition = createEndpointDiscovery({ log: () => {} }).service.definition;
    const envoy = new FakeEnvoy(definition, `127.0.0.1:${aggregator.grpcPort}`);
    try {
      envoy.send({ resource_names: [poolClusterName("llama")] });
      const first = await envoy.next();
      expect(hostsOf(first)).toEqual({ llm_gateway_pool_llama: ["127.0.0.1:9301", "127.0.0.1:9302"] });
      envoy.send({ resource_names: [poolClusterName("llama")], version_info: first.version_info, response_nonce: first.nonce });

      answer = "127.0.0.9"; // the pod came back elsewhere
      const moved = await envoy.next(5_000);
      expect(hostsOf(moved)).toEqual({ llm_gateway_pool_llama: ["127.0.0.1:9302", "127.0.0.9:9301"] });
      expect(Number(moved.version_info)).toBeGreaterThan(Number(first.version_info));
      const metrics = await (await fetch(`http://127.0.0.1:${aggregator.metricsPort}/metrics`)).text();
      expect(metrics).toContain(`llm_gateway_endpoints_version ${moved.version_info}\n`);
      expect(metrics).toContain("llm_gateway_ads_streams 1\n");
    } finally {
      envoy.close();
      await aggregator.close();
    }
  });
});
