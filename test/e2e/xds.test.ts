// The aggregator's ADS server (host/aggregator/xds.ts): the state-of-the-world
// protocol for endpoints, clusters and routes against a gRPC client playing
// Envoy; then real Envoys: one rendered complete whose pool clusters follow
// the endpoint sets, one on the split bootstrap that takes its clusters and
// routes from the server (and refuses a bad cluster, keeping its own), one
// started before the aggregator; then the aggregator pushing a DNS name's
// new address, and marking pods whose scrapes fail UNHEALTHY.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { isDeepStrictEqual } from "node:util";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { startAggregator } from "../../host/aggregator/index.js";
import { startSnapshotServer, type SnapshotServer } from "../../host/aggregator/push.js";
import { serveResources } from "../../host/aggregator/reload.js";
import {
  CLUSTER_LOAD_ASSIGNMENT_TYPE as CLA,
  CLUSTER_TYPE as CDS,
  ROUTE_CONFIGURATION_TYPE as RDS,
  createDiscoveryServer,
  poolClusterName,
  type DiscoveryServer,
} from "../../host/aggregator/xds.js";
import { parseGatewayConfig } from "../../host/config.js";
import { renderEnvoyConfig, renderEnvoyXds, type EnvoyConfigParams } from "../../host/envoy/index.js";
import { startEnvoy, type EnvoyProcess } from "../../testing/launcher/envoy-process.js";
import { filterWasmPath } from "../../host/paths.js";
import { FakeEnvoy, type AdsResponse } from "../helpers/fake-envoy.js";
import { stablePort, waitFor } from "../helpers/stack.js";

/** "ip:port" per cluster name, from an endpoints response. */
function hostsOf(r: AdsResponse): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const a of r.resources) {
    expect(a["@type"]).toBe(CLA);
    out[a.cluster_name] = (a.endpoints ?? []).flatMap((l: any) =>
      (l.lb_endpoints ?? []).map((e: any) => `${e.endpoint.address.socket_address.address}:${e.endpoint.address.socket_address.port_value}`));
  }
  return out;
}

/** Each host's health_status per cluster name, from an endpoints response. */
function healthOf(r: AdsResponse): Record<string, Record<string, string>> {
  const out: Record<string, Record<string, string>> = {};
  for (const a of r.resources) {
    out[a.cluster_name] = Object.fromEntries((a.endpoints ?? []).flatMap((l: any) =>
      (l.lb_endpoints ?? []).map((e: any) => [`${e.endpoint.address.socket_address.address}:${e.endpoint.address.socket_address.port_value}`, e.health_status])));
  }
  return out;
}

const names = (r: AdsResponse) => r.resources.map((x) => x.name as string);
const snapshot = { version: 1, models: [], pools: [], generatedUnixMs: 0 };

/** A pool cluster as the template renders it, and its route table. */
const cluster = (pool: string) => ({
  name: poolClusterName(pool),
  type: "EDS",
  eds_cluster_config: { eds_config: { ads: {}, resource_api_version: "V3" } },
  connect_timeout: "1s",
});
const routes = (pools: string[]) => ({
  name: "llm_gateway",
  virtual_hosts: [{
    name: "llm_gateway",
    domains: ["*"],
    routes: pools.map((p) => ({ match: { prefix: "/", headers: [{ name: "x-gateway-pool", string_match: { exact: p } }] }, route: { cluster: poolClusterName(p), timeout: "0s" } })),
  }],
});

describe("ADS protocol", () => {
  let discovery: DiscoveryServer;
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
    discovery = createDiscoveryServer({ log: (l) => logs.push(l) });
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
    discovery.setEndpoints(new Map([
      ["a", ["127.0.0.1:9002", "127.0.0.1:9001"]],
      ["b:c/d", ["[::1]:9003"]],
      ["e", []],
    ]));
    const envoy = connect();
    envoy.send({ node: { id: "envoy-1" }, resource_names: [A, B] });
    const r = await envoy.next();
    expect(r.type_url).toBe(CLA);
    expect(r.version_info).toBe(String(discovery.version(CLA)));
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
    onA.ack(first, [A, B]);
    onE.ack(firstE, [C]);
    await onA.nothingFor();

    discovery.setEndpoints(new Map([["a", ["127.0.0.1:9001"]]]));
    const pushed = await onA.next();
    expect(Number(pushed.version_info)).toBe(Number(first.version_info) + 1);
    expect(pushed.nonce).not.toBe(first.nonce);
    // The whole subscription, not just the pool that changed.
    expect(hostsOf(pushed)).toEqual({ [A]: ["127.0.0.1:9001"], [B]: ["::1:9003"] });
    await onE.nothingFor();

    // The same set again is no change: no new version, no push.
    const version = discovery.version(CLA);
    discovery.setEndpoints(new Map([["a", ["127.0.0.1:9001", "127.0.0.1:9001"]]]));
    expect(discovery.version(CLA)).toBe(version);
    await onA.nothingFor();
  });

  it("ignores a stale nonce, does not resend a rejected version, and answers a new subscription", async () => {
    const envoy = connect();
    envoy.send({ resource_names: [A] });
    const r1 = await envoy.next();
    discovery.setEndpoints(new Map([["a", ["127.0.0.1:9005"]]]));
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
    expect(logs.some((l) => l.includes(`rejected endpoints version ${r2.version_info} and keeps its previous ones: bad endpoint`))).toBe(true);

    envoy.send({ resource_names: [A, C], version_info: r1.version_info, response_nonce: r2.nonce });
    const r3 = await envoy.next();
    expect(hostsOf(r3)).toEqual({ [A]: ["127.0.0.1:9005"], [C]: [] });
  });

  it("leaves out names it does not serve, and ignores types it does not serve", async () => {
    const envoy = connect();
    envoy.send({ resource_names: [A, "llm_gateway_pool_ghost"] });
    expect(Object.keys(hostsOf(await envoy.next()))).toEqual([A]);
    expect(logs.some((l) => l.includes("asks for llm_gateway_pool_ghost, which is not served here"))).toBe(true);

    const other = connect();
    other.send({ type_url: "type.googleapis.com/envoy.config.listener.v3.Listener", resource_names: [] });
    await other.nothingFor();
  });

  it("marks the endpoints whose scrapes fail UNHEALTHY while one of the pool is not, and all HEALTHY when every one fails", async () => {
    const envoy = connect();
    const failing = (pool: string, ...addresses: string[]) => new Map([[pool, new Set(addresses)]]);
    discovery.setEndpoints(new Map([["e", ["127.0.0.1:9011", "127.0.0.1:9012", "127.0.0.1:9013"]]]), failing("e", "127.0.0.1:9012"));
    envoy.send({ resource_names: [C] });
    expect(healthOf(await envoy.next())).toEqual({ [C]: { "127.0.0.1:9011": "HEALTHY", "127.0.0.1:9012": "UNHEALTHY", "127.0.0.1:9013": "HEALTHY" } });
    expect(logs).toContain(`endpoints version ${discovery.version(CLA)}: ${C}=[127.0.0.1:9011,127.0.0.1:9012 unhealthy,127.0.0.1:9013]`);

    // Same pods, another one failing: a new version, pushed.
    const version = discovery.version(CLA);
    discovery.setEndpoints(new Map([["e", ["127.0.0.1:9011", "127.0.0.1:9012", "127.0.0.1:9013"]]]), failing("e", "127.0.0.1:9011", "127.0.0.1:9012"));
    expect(discovery.version(CLA)).toBe(version + 1);
    expect(healthOf(await envoy.next())[C]).toEqual({ "127.0.0.1:9011": "UNHEALTHY", "127.0.0.1:9012": "UNHEALTHY", "127.0.0.1:9013": "HEALTHY" });

    // Every pod failing: none is marked (fail open, as the filter does), or Envoy would have no host to try.
    discovery.setEndpoints(new Map([["e", ["127.0.0.1:9011", "127.0.0.1:9012", "127.0.0.1:9013"]]]), failing("e", "127.0.0.1:9011", "127.0.0.1:9012", "127.0.0.1:9013"));
    expect(healthOf(await envoy.next())[C]).toEqual({ "127.0.0.1:9011": "HEALTHY", "127.0.0.1:9012": "HEALTHY", "127.0.0.1:9013": "HEALTHY" });
    // Failing addresses that are not the pool's mark nothing either.
    discovery.setEndpoints(new Map([["e", ["127.0.0.1:9011"]]]), failing("e", "127.0.0.1:9099"));
    expect(healthOf(await envoy.next())[C]).toEqual({ "127.0.0.1:9011": "HEALTHY" });
    discovery.setEndpoints(new Map([["e", []]]));
  });

  it("refuses an endpoint that is not an ip:port literal", () => {
    expect(() => discovery.setEndpoints(new Map([["a", ["pod-0:8000"]]]))).toThrow(/not an ip:port literal/);
    expect(() => discovery.setEndpoints(new Map([["a", ["127.0.0.1"]]]))).toThrow(/not an ip:port literal/);
  });

  it("serves every cluster to a wildcard subscription, a route table by name, and pushes each type's changes with its own version", async () => {
    discovery.setResources(CDS, new Map([[A, cluster("a")], [B, cluster("b:c/d")]]));
    discovery.setResources(RDS, new Map([["llm_gateway", routes(["a", "b:c/d"])]]));
    const envoy = connect();
    envoy.send({ type_url: CDS, resource_names: [] });
    const clusters = await envoy.next();
    expect(clusters.type_url).toBe(CDS);
    expect(clusters.resources.map((c) => c["@type"])).toEqual([CDS, CDS]);
    expect(names(clusters)).toEqual([A, B]);
    // As encoded from proto3 JSON: the duration and the enum read back.
    expect(clusters.resources[0]).toMatchObject({ type: "EDS", connect_timeout: { seconds: "1" } });
    envoy.ack(clusters);
    envoy.send({ type_url: RDS, resource_names: ["llm_gateway"] });
    const table = await envoy.next();
    expect(table.resources[0].virtual_hosts[0].routes.map((r: any) => r.route.cluster)).toEqual([A, B]);
    envoy.ack(table, ["llm_gateway"]);
    await envoy.nothingFor();

    // A cluster left out of the wildcard set is removed; the route table moves on its own.
    const rdsVersion = discovery.version(RDS);
    expect(discovery.setResources(CDS, new Map([[A, cluster("a")]]))).toBe(true);
    const fewer = await envoy.next();
    expect([fewer.type_url, names(fewer), fewer.version_info]).toEqual([CDS, [A], String(discovery.version(CDS))]);
    expect(discovery.version(RDS)).toBe(rdsVersion);
    expect(discovery.setResources(CDS, new Map([[A, cluster("a")]]))).toBe(false);
    envoy.ack(fewer);
    await envoy.nothingFor();
  });

  it("refuses, changing nothing, a resource the API cannot encode", () => {
    const version = discovery.version(CDS);
    expect(() => discovery.setResources(CDS, new Map([[A, { ...cluster("a"), conect_timeout: "1s" }]]))).toThrow(
      /Cluster\.conect_timeout: envoy\.config\.cluster\.v3\.Cluster has no field conect_timeout/,
    );
    expect(() => discovery.setResources(CDS, new Map([[A, { ...cluster("a"), type: "DNS" }]]))).toThrow(/"DNS" is no value of/);
    expect(() => discovery.setResources(CDS, new Map([[A, { ...cluster("a"), connect_timeout: "1 s" }]]))).toThrow(/expected a duration/);
    expect(discovery.version(CDS)).toBe(version);
  });

  it("settles once every Envoy accepted the resources and has the endpoints of each new cluster; a NACK of them ends the wait", async () => {
    discovery.setResources(CDS, new Map([[A, cluster("a")]]));
    discovery.setEndpoints(new Map([["e", ["127.0.0.1:9301"]]]));
    const envoy = connect();
    envoy.send({ type_url: CDS, resource_names: [] });
    envoy.ack(await envoy.next());
    envoy.send({ resource_names: [A] });
    const eds = await envoy.next();
    envoy.ack(eds, [A]);
    expect(await discovery.settled(1_000)).toEqual({ ok: true });
    // Endpoints of a pool this Envoy has no cluster of: nothing is sent, nothing to wait for.
    discovery.setEndpoints(new Map([["e", ["127.0.0.1:9302"]]]));
    expect(await discovery.settled(1_000)).toEqual({ ok: true });

    discovery.setResources(CDS, new Map([[A, cluster("a")], [C, cluster("e")]]));
    const settling = discovery.settled(5_000);
    const added = await envoy.next();
    envoy.ack(added);
    // Accepted, but the new cluster is warm only with its endpoints.
    const early = await Promise.race([settling, new Promise((r) => setTimeout(() => r("pending"), 300))]);
    expect(early).toBe("pending");
    envoy.send({ resource_names: [A, C], version_info: eds.version_info, response_nonce: eds.nonce });
    const endpoints = await envoy.next();
    expect(Object.keys(hostsOf(endpoints))).toEqual([A, C]);
    envoy.ack(endpoints, [A, C]);
    expect(await settling).toEqual({ ok: true });

    discovery.setResources(CDS, new Map([[A, cluster("a")]]));
    const refusing = discovery.settled(5_000);
    const removed = await envoy.next();
    envoy.send({ type_url: CDS, version_info: added.version_info, response_nonce: removed.nonce, error_detail: { message: "no, thanks" } });
    const outcome = await refusing;
    expect(outcome).toMatchObject({ ok: false, timedOut: false });
    expect(outcome.ok || outcome.reason).toMatch(new RegExp(`rejected clusters version ${removed.version_info}: no, thanks`));

    // Until other clusters are sent, every wait ends the same way.
    expect(await discovery.settled(200)).toMatchObject({ ok: false, timedOut: false });
    // A stream that goes away is not waited for.
    envoy.close();
    await waitFor("the stream to be forgotten", () => discovery.streams() === 0);
    expect(await discovery.settled(1_000)).toEqual({ ok: true });
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

    const other = createDiscoveryServer({ log: () => {} });
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

const gatewayParams = (aggregatorPort: number, pools: string[], wasmFilter = true): EnvoyConfigParams => ({
  gatewayHost: "127.0.0.1",
  gatewayPort: 0,
  adminPort: 0,
  aggregatorHost: "127.0.0.1",
  aggregatorPort,
  wasmPath: filterWasmPath,
  maxBodyBytes: 1024 * 1024,
  pools,
  wasmFilter,
});

describe("a real Envoy rendered complete (pools static, endpoints over ADS)", () => {
  let discovery: DiscoveryServer;
  let server: SnapshotServer;
  let envoy: EnvoyProcess;
  const clusters = () => clusterHosts(envoy);

  beforeAll(async () => {
    discovery = createDiscoveryServer({ log: () => {} });
    discovery.setEndpoints(new Map([["llama", ["127.0.0.1:9101", "127.0.0.1:9102"]], ["qwen", []]]));
    server = await startSnapshotServer({ host: "127.0.0.1", port: 0, current: () => snapshot, log: () => {}, services: [discovery.service] });
    envoy = await startEnvoy({ configYaml: renderEnvoyConfig(gatewayParams(server.port, ["llama", "qwen"])), concurrency: 2 });
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
    discovery.setEndpoints(new Map([["llama", ["127.0.0.1:9102", "127.0.0.1:9103"]], ["qwen", ["127.0.0.1:9201"]]]));
    await waitFor("Envoy to take the new sets", async () => {
      const hosts = await clusters();
      return hosts.llm_gateway_pool_llama.join() === "127.0.0.1:9102,127.0.0.1:9103" && hosts.llm_gateway_pool_qwen.join() === "127.0.0.1:9201";
    });
    discovery.setEndpoints(new Map([["llama", []]]));
    await waitFor("the llama pool to empty", async () => (await clusters()).llm_gateway_pool_llama.length === 0);
    expect(envoy.pid).toBe(pid);
    // Every version was accepted: Envoy counts the updates and no rejection.
    const stats = await envoy.stats("cluster\\.llm_gateway_pool_llama\\.update_(success|rejected)$");
    expect(stats["cluster.llm_gateway_pool_llama.update_rejected"]).toBe(0);
    expect(stats["cluster.llm_gateway_pool_llama.update_success"]).toBeGreaterThanOrEqual(3);
  });
});

describe("a real Envoy on the split bootstrap (clusters and routes over ADS)", () => {
  let discovery: DiscoveryServer;
  let server: SnapshotServer;
  let envoy: EnvoyProcess;
  const logs: string[] = [];
  /** What the aggregator serves for these pools: the same rendering's resources. */
  const serve = (pools: string[]) => serveResources(discovery, renderEnvoyXds(gatewayParams(1, pools)).resources);
  const routedClusters = async () => {
    const dump = (await (await fetch(`${envoy.adminUrl}/config_dump?resource=dynamic_route_configs`)).json()) as { configs: any[] };
    // Each pool has two routes (its stream twin first): its cluster once.
    return [...new Set(dump.configs[0].route_config.virtual_hosts[0].routes.flatMap((r: any) => (r.route ? [r.route.cluster] : [])))];
  };

  beforeAll(async () => {
    discovery = createDiscoveryServer({ log: (l) => logs.push(l) });
    serve(["llama"]);
    discovery.setEndpoints(new Map([["llama", ["127.0.0.1:9101"]], ["qwen", ["127.0.0.1:9201", "127.0.0.1:9202"]]]));
    server = await startSnapshotServer({ host: "127.0.0.1", port: 0, current: () => snapshot, log: () => {}, services: [discovery.service] });
    envoy = await startEnvoy({ configYaml: renderEnvoyXds(gatewayParams(server.port, [])).bootstrap, concurrency: 2 });
  });
  afterAll(async () => {
    await envoy?.stop();
    discovery?.close();
    await server?.close();
  });

  it("starts with the served clusters, their endpoints and the route table", async () => {
    expect(await clusterHosts(envoy)).toEqual({ llm_gateway_pool_llama: ["127.0.0.1:9101"] });
    expect(await routedClusters()).toEqual(["llm_gateway_pool_llama"]);
    expect(await discovery.settled(5_000)).toEqual({ ok: true });
  });

  it("adds and removes a pool's cluster and route without a restart, warm with its endpoints when settled", async () => {
    const pid = envoy.pid;
    serve(["llama", "qwen"]);
    expect(await discovery.settled(10_000)).toEqual({ ok: true });
    expect(await clusterHosts(envoy)).toEqual({ llm_gateway_pool_llama: ["127.0.0.1:9101"], llm_gateway_pool_qwen: ["127.0.0.1:9201", "127.0.0.1:9202"] });
    expect(await routedClusters()).toEqual(["llm_gateway_pool_llama", "llm_gateway_pool_qwen"]);

    serve(["qwen"]);
    expect(await discovery.settled(10_000)).toEqual({ ok: true });
    expect(await clusterHosts(envoy)).toEqual({ llm_gateway_pool_qwen: ["127.0.0.1:9201", "127.0.0.1:9202"] });
    expect(await routedClusters()).toEqual(["llm_gateway_pool_qwen"]);
    expect(envoy.pid).toBe(pid);
  });

  it("rejects a cluster Envoy finds invalid: the wait ends with Envoy's reason, and Envoy keeps what it had", async () => {
    const valid = renderEnvoyXds(gatewayParams(1, ["qwen"])).resources;
    // Encodes, but breaks Envoy's own rule (connect_timeout must be > 0).
    const invalid = { ...valid, clusters: [{ ...valid.clusters[0], connect_timeout: "0s" }] };
    serveResources(discovery, invalid);
    const outcome = await discovery.settled(10_000);
    expect(outcome).toMatchObject({ ok: false, timedOut: false });
    expect(outcome.ok || outcome.reason).toMatch(/rejected clusters version \d+: .*ConnectTimeout|connect_timeout/i);
    expect(logs.some((l) => /rejected clusters version \d+ and keeps its previous ones/.test(l))).toBe(true);
    expect(await clusterHosts(envoy)).toEqual({ llm_gateway_pool_qwen: ["127.0.0.1:9201", "127.0.0.1:9202"] });
    const stats = await envoy.stats("^cluster_manager\\.cds\\.update_rejected$");
    expect(stats["cluster_manager.cds.update_rejected"]).toBeGreaterThanOrEqual(1);

    // Sending the accepted ones again settles.
    serveResources(discovery, valid);
    expect(await discovery.settled(10_000)).toEqual({ ok: true });
  });
});

describe("an Envoy started before the aggregator", () => {
  let envoy: EnvoyProcess | undefined;
  let server: SnapshotServer | undefined;
  let discovery: DiscoveryServer | undefined;
  afterAll(async () => {
    await envoy?.stop();
    discovery?.close();
    await server?.close();
  });

  it("serves JSON 503s after the initial fetch timeouts, then takes the clusters, routes and endpoints when the aggregator comes up", async () => {
    const port = await stablePort();
    const started = Date.now();
    envoy = await startEnvoy({ configYaml: renderEnvoyXds(gatewayParams(port, [], false)).bootstrap, concurrency: 2 });
    const waited = Date.now() - started;
    // The clusters' 3 s, then the route table's 3 s; not Envoy's default 15 s each
    // (either of them at 15 s takes 18 s or more: that bound leaves a slow start room).
    expect(waited).toBeGreaterThan(5_000);
    expect(waited).toBeLessThan(15_000);
    const r = await fetch(`http://${envoy.listenerAddresses.llm_gateway}/v1/chat/completions`, { method: "POST", body: "{}" });
    expect(r.status).toBe(503);
    const body = (await r.json()) as { error: { type: string; code: string; message: string } };
    expect(body.error).toMatchObject({ type: "server_error", code: "service_unavailable" });
    expect(body.error.message).toContain("no route table yet");
    expect(await clusterHosts(envoy)).toEqual({});

    discovery = createDiscoveryServer({ log: () => {} });
    serveResources(discovery, renderEnvoyXds(gatewayParams(1, ["llama", "qwen"])).resources);
    discovery.setEndpoints(new Map([["llama", ["127.0.0.1:9401"]], ["qwen", []]]));
    server = await startSnapshotServer({ host: "127.0.0.1", port, current: () => snapshot, log: () => {}, services: [discovery.service] });
    await waitFor("Envoy to reconnect and take the pools", async () =>
      (await clusterHosts(envoy!)).llm_gateway_pool_llama?.join() === "127.0.0.1:9401", 30_000);
    // The route table is in: without the filter no pool is chosen, and the fail-closed route answers.
    await waitFor("the route table", async () => {
      const res = await fetch(`http://${envoy!.listenerAddresses.llm_gateway}/v1/models`);
      return res.status === 503 && !((await res.json()) as { error: { message: string } }).error.message.includes("no route table");
    });
  }, 60_000);
});

/** A vLLM /metrics page, for as long as it is up. */
async function metricsPod(): Promise<{ address: string; close(): Promise<void> }> {
  const server = http.createServer((_req, res) =>
    res.end('vllm:num_requests_waiting{engine="0",model_name="m"} 0\nvllm:num_requests_running{engine="0",model_name="m"} 0\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} 0\n'),
  );
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((r) => {
      server.closeAllConnections();
      server.close(() => r());
    }),
  };
}

describe("the aggregator", () => {
  it("marks a pod whose scrapes fail UNHEALTHY for Envoy while another pod answers, and none when no pod does", async () => {
    const pods = [await metricsPod(), await metricsPod()];
    const [a, b] = pods.map((p) => p.address);
    const config = parseGatewayConfig(
      stringify({
        gateway: { host: "127.0.0.1", port: 0, adminPort: 0 },
        aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0, scrapeIntervalMs: 50, staleAfterMs: 1000 },
        pools: [{ name: "llama", baseModel: "llama-3.1-8b", endpoints: [a, b] }],
      }),
      "health test",
    );
    const aggregator = await startAggregator(config, { port: 0, metricsPort: false, log: () => {} });
    const envoy = new FakeEnvoy(createDiscoveryServer({ log: () => {} }).service.definition, `127.0.0.1:${aggregator.grpcPort}`);
    /** The next endpoints push that shows `want`, failing after a few seconds. */
    const until = async (want: Record<string, string>) => {
      for (;;) {
        const r = await envoy.next(10_000);
        envoy.ack(r, [poolClusterName("llama")]);
        if (isDeepStrictEqual(healthOf(r).llm_gateway_pool_llama, want)) return;
      }
    };
    try {
      envoy.send({ resource_names: [poolClusterName("llama")] });
      await until({ [a]: "HEALTHY", [b]: "HEALTHY" });
      await pods[1].close();
      await until({ [a]: "HEALTHY", [b]: "UNHEALTHY" });
      await pods[0].close();
      await until({ [a]: "HEALTHY", [b]: "HEALTHY" });
    } finally {
      envoy.close();
      await aggregator.close();
      await Promise.all(pods.map((p) => p.close()));
    }
  });

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
    const definition = createDiscoveryServer({ log: () => {} }).service.definition;
    const envoy = new FakeEnvoy(definition, `127.0.0.1:${aggregator.grpcPort}`);
    try {
      envoy.send({ resource_names: [poolClusterName("llama")] });
      const first = await envoy.next();
      expect(hostsOf(first)).toEqual({ llm_gateway_pool_llama: ["127.0.0.1:9301", "127.0.0.1:9302"] });
      envoy.ack(first, [poolClusterName("llama")]);

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
