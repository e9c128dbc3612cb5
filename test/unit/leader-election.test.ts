// aggregator.leaderElection: the config refuses what cannot work (naming the
// field), Envoy's bootstrap lists and health-checks every aggregator, the
// peers rule picks the first one that answers, and a standby's gRPC port
// answers the health check NOT_SERVING and refuses the streams.
import * as grpc from "@grpc/grpc-js";
import { createServer, type Server } from "node:net";
import { parse } from "yaml";
import { afterEach, describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../../host/config.js";
import { envoyParamsFromGatewayConfig, renderEnvoyXds } from "../../host/envoy/index.js";
import { peerLeadership } from "../../host/aggregator/leader-peers.js";
import { soleLeadership, type Leadership } from "../../host/aggregator/leadership.js";
import { startSnapshotServer, type SnapshotServer } from "../../host/aggregator/push.js";
import { healthCheckDefinition, standbyGate } from "../../host/aggregator/standby.js";
import { snapshotServiceDefinition } from "../../host/proto.js";
import { waitFor } from "../helpers/stack.js";

const POOLS = `pools: [{ name: llama, baseModel: m, endpoints: ["127.0.0.1:8000"] }]`;
const withElection = (election: string, extra = "") => `${extra}\naggregator: { port: 50061, leaderElection: ${election} }\n${POOLS}`;

describe("aggregator.leaderElection config", () => {
  it("takes a Lease or a list of peers, with defaults", () => {
    const lease = parseGatewayConfig(withElection("{ lease: { namespace: gw } }")).aggregator.leaderElection;
    expect(lease).toEqual({ lease: { namespace: "gw", name: "llm-gateway-aggregator", durationS: 2 }, probeMs: 100 });
    const peers = parseGatewayConfig(withElection('{ peers: ["127.0.0.1:50061", "127.0.0.1:50062"] }')).aggregator.leaderElection;
    expect(peers?.peers).toEqual(["127.0.0.1:50061", "127.0.0.1:50062"]);
    expect(parseGatewayConfig(POOLS).aggregator.leaderElection).toBeUndefined();
  });

  it("refuses what cannot elect one leader in time, naming the field", () => {
    expect(() => parseGatewayConfig(withElection("{}"))).toThrow(/aggregator\.leaderElection: give exactly one of lease .* or peers/);
    expect(() => parseGatewayConfig(withElection('{ lease: { namespace: gw }, peers: ["a:1", "b:1"] }'))).toThrow(/aggregator\.leaderElection: give exactly one/);
    expect(() => parseGatewayConfig(withElection('{ peers: ["127.0.0.1:1"] }'))).toThrow(/aggregator\.leaderElection\.peers: expected at least two aggregators/);
    expect(() => parseGatewayConfig(withElection('{ peers: ["a:1", "a:1"] }'))).toThrow(/aggregator\.leaderElection\.peers: an aggregator is listed twice/);
    expect(() => parseGatewayConfig(withElection('{ peers: ["a:1", "no port"] }'))).toThrow(/aggregator\.leaderElection\.peers\[1\]: expected host:port/);
    expect(() => parseGatewayConfig(withElection("{ lease: { namespace: gw, durationS: 3 } }"))).toThrow(
      /aggregator\.leaderElection\.lease\.durationS: a hung leader is replaced up to 4150 ms after .*gateway\.staleView\.maxAgeMs \(3000 ms\) must be longer/,
    );
    expect(() => parseGatewayConfig(withElection("{ lease: { namespace: gw, durationS: 3 } }", "gateway: { staleView: { maxAgeMs: 5000 } }"))).not.toThrow();
    // The defaults fit the default stale bound: 2 s x 1.25 + 4 x 100 ms = 2900 ms < 3000 ms.
    expect(() => parseGatewayConfig(withElection("{ lease: { namespace: gw } }"))).not.toThrow();
    expect(() => parseGatewayConfig(withElection("{ lease: { namespace: gw }, probeMs: 2000 }"))).toThrow(/aggregator\.leaderElection\.probeMs: must be under half/);
  });
});

describe("Envoy's aggregator cluster with leader election", () => {
  const render = (text: string) => parse(renderEnvoyXds(envoyParamsFromGatewayConfig(parseGatewayConfig(text), { wasmPath: "/x/filter.wasm" })).bootstrap);
  const cluster = (doc: any) => doc.static_resources.clusters.find((c: any) => c.name === "llm_gateway_aggregator");

  it("lists every peer, health-checks them over gRPC and never sends a stream to one that fails", () => {
    const doc = render(withElection('{ peers: ["127.0.0.1:50061", "127.0.0.1:50062"], probeMs: 50 }'));
    const c = cluster(doc);
    expect(c.load_assignment.endpoints[0].lb_endpoints.map((e: any) => e.endpoint.address.socket_address)).toEqual([
      { address: "127.0.0.1", port_value: 50061 },
      { address: "127.0.0.1", port_value: 50062 },
    ]);
    expect(c.health_checks).toEqual([
      { timeout: "1s", interval: "0.05s", no_traffic_interval: "0.05s", unhealthy_threshold: 1, healthy_threshold: 1, grpc_health_check: { service_name: "llmgateway.v1.SnapshotService" } },
    ]);
    expect(c.common_lb_config).toEqual({ healthy_panic_threshold: { value: 0 }, update_merge_window: "0s" });
    expect(c.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].explicit_http_config.http2_protocol_options.connection_keepalive).toEqual({ interval: "0.25s", timeout: "0.25s" });
    expect(doc.dynamic_resources.ads_config.grpc_services[0].envoy_grpc.retry_policy.retry_back_off).toEqual({ base_interval: "0.05s", max_interval: "0.5s" });
    const link = JSON.parse(doc.bootstrap_extensions[0].typed_config.config.configuration.value);
    expect(link).toMatchObject({ aggregator_cluster: "llm_gateway_aggregator", reconnect_min_ms: 50, reconnect_max_ms: 100 });
  });

  it("keeps the one address (a name resolving to every replica) with a Lease, and renders a lone aggregator as before", () => {
    const leased = cluster(render(withElection("{ lease: { namespace: gw } }")));
    expect(leased.load_assignment.endpoints[0].lb_endpoints).toHaveLength(1);
    expect(leased.health_checks).toHaveLength(1);
    const lone = cluster(render(POOLS));
    expect(lone.health_checks).toBeUndefined();
    expect(lone.common_lb_config).toBeUndefined();
  });
});

describe("leadership by static peers", () => {
  const servers: Server[] = [];
  const elected: Leadership[] = [];
  afterEach(async () => {
    for (const l of elected.splice(0)) await l.close();
    await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  });
  const listen = async () => {
    const server = createServer((socket) => socket.destroy());
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
    return { server, address: `127.0.0.1:${(server.address() as { port: number }).port}` };
  };

  it("refuses an aggregator that is not in the list, naming the field", async () => {
    await expect(peerLeadership(["127.0.0.1:1", "127.0.0.1:2"], 20, { self: "127.0.0.1:3", log: () => {} })).rejects.toThrow(
      /aggregator\.leaderElection\.peers: this aggregator's address 127\.0\.0\.1:3 is not in the list/,
    );
  });

  it("leads when no peer listed before it answers, and stands by while one does", async () => {
    const first = await listen();
    const self = await listen();
    const lines: string[] = [];
    const l = await peerLeadership([first.address, self.address], 20, { self: self.address, log: (line) => lines.push(line) });
    elected.push(l);
    expect(l.leading()).toBe(false);
    expect(l.leader()).toBe(first.address);
    const changes: boolean[] = [];
    l.onChange((leading) => changes.push(leading));
    await new Promise((r) => first.server.close(r));
    await waitFor("the standby to lead", () => l.leading());
    expect(changes).toEqual([true]);
    expect(l.leader()).toBe(self.address);
    expect(lines.at(-1)).toMatch(/^leading: no aggregator listed before/);
    // The first listed is always the leader, whatever the others do.
    const alone = await peerLeadership([first.address, self.address], 20, { self: first.address, log: () => {} });
    elected.push(alone);
    expect(alone.leading()).toBe(true);
  });
});

describe("a standby's gRPC port", () => {
  let server: SnapshotServer | null = null;
  afterEach(async () => {
    await server?.close();
    server = null;
  });

  it("answers the health check NOT_SERVING and refuses the snapshot stream, then serves once it leads", async () => {
    let leading = false;
    const listeners: Array<(l: boolean) => void> = [];
    const leadership: Leadership = { ...soleLeadership("127.0.0.1:9"), leading: () => leading, leader: () => "127.0.0.1:9", onChange: (cb) => void listeners.push(cb) };
    server = await startSnapshotServer({
      host: "127.0.0.1",
      port: 0,
      current: () => ({ version: 7, models: [], pools: [], generatedUnixMs: 0 }),
      log: () => {},
      standby: standbyGate(() => leadership, () => {}),
    });
    const target = `127.0.0.1:${server.port}`;
    const Health = grpc.makeGenericClientConstructor(healthCheckDefinition, "Health");
    const health = new Health(target, grpc.credentials.createInsecure()) as unknown as { Check(req: string, cb: (err: Error | null, status: number) => void): void; close(): void };
    const check = () => new Promise<number>((resolve, reject) => health.Check("llmgateway.v1.SnapshotService", (err, status) => (err ? reject(err) : resolve(status))));
    const Snapshots = grpc.makeGenericClientConstructor(snapshotServiceDefinition, "SnapshotService");
    const snapshots = new Snapshots(target, grpc.credentials.createInsecure()) as unknown as { Watch(): grpc.ClientDuplexStream<unknown, { version: string | number }>; close(): void };
    try {
      expect(await check()).toBe(2);
      const refused = await new Promise<grpc.ServiceError>((resolve) => snapshots.Watch().on("error", resolve).on("data", () => {}));
      expect(refused.code).toBe(grpc.status.UNAVAILABLE);
      expect(refused.details).toBe("standby aggregator: the leader is 127.0.0.1:9");

      leading = true;
      expect(await check()).toBe(1);
      const watch = snapshots.Watch();
      const first = await new Promise<{ version: string | number }>((resolve) => watch.once("data", resolve));
      expect(Number(first.version)).toBe(7);
      // Losing the lead ends the stream it held.
      const ended = new Promise<grpc.ServiceError>((resolve) => watch.on("error", resolve));
      leading = false;
      for (const cb of listeners) cb(false);
      expect((await ended).code).toBe(grpc.status.UNAVAILABLE);
    } finally {
      health.close();
      snapshots.close();
    }
  });
});
