// The aggregator as a fleet grows and moves: one snapshot per scrape cycle
// however many pods changed, pods entering and leaving with their discovery
// source (Envoy's endpoints and the snapshot both follow), the telemetry
// hooks, and the interval that adapts to the fleet's cost.
import http from "node:http";
import type { AddressInfo } from "node:net";
import * as grpc from "@grpc/grpc-js";
import { afterEach, describe, expect, it } from "vitest";
import { startAggregator, type Aggregator, type Snapshot } from "../../host/aggregator/index.js";
import { adaptInterval, CORE_SHARE } from "../../host/aggregator/cycle.js";
import { NO_TELEMETRY, type AggregatorTelemetry } from "../../host/aggregator/telemetry.js";
import { createDiscoveryServer, poolClusterName, type DiscoveryRequest } from "../../host/aggregator/xds.js";
import { parseGatewayConfig } from "../../host/config.js";
import type { DiscoveryEventKind } from "../../host/discovery/source.js";
import { encodeSnapshot, snapshotServiceDefinition } from "../../host/proto.js";

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function waitFor<T>(what: string, probe: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** An HTTP server on `host` (any 127.0.0.0/8 address) and a given or free port, closed after the test. */
async function listen(handler: http.RequestListener, host = "127.0.0.1", port = 0): Promise<number> {
  const server = http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(port, host, resolve));
  cleanups.push(() => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  return (server.address() as AddressInfo).port;
}

/** A pod whose page is `body(hit)`. */
interface Pod {
  port: number;
  hits: number;
  body: (hit: number) => string;
}
async function startPod(body: (hit: number) => string, host = "127.0.0.1", port = 0): Promise<Pod> {
  const pod: Pod = { port, hits: 0, body };
  pod.port = await listen((_req, res) => {
    pod.hits++;
    res.writeHead(200, { "content-type": "text/plain" }).end(pod.body(pod.hits));
  }, host, port);
  return pod;
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}
const vllm = (waiting: number, kv = 0.5) => `vllm:num_requests_waiting ${waiting}\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc ${kv}\n`;

/** Telemetry that records every call. */
function recordingTelemetry() {
  const t = {
    scrapes: [] as Array<{ pool: string; pod: string; error: string | null }>,
    discovery: [] as Array<[string, DiscoveryEventKind]>,
    pushes: [] as Array<{ bytes: number; delayMs: number }>,
    cycles: [] as Array<{ cpuMs: number; intervalMs: number }>,
  };
  const hooks: AggregatorTelemetry = {
    ...NO_TELEMETRY,
    scrape: (pool, pod, _s, error) => t.scrapes.push({ pool, pod, error }),
    discovery: (pool, kind) => t.discovery.push([pool, kind]),
    snapshotPushed: (bytes, delayMs) => t.pushes.push({ bytes, delayMs }),
    cycle: (cpuMs, intervalMs) => t.cycles.push({ cpuMs, intervalMs }),
  };
  return { t, hooks };
}

const SnapshotService = grpc.makeGenericClientConstructor(snapshotServiceDefinition, "SnapshotService");
/** Snapshots a Watch stream receives, heartbeats left out. */
function watch(port: number): Snapshot[] {
  const got: Snapshot[] = [];
  const conn = new SnapshotService(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const call = conn["Watch"]() as grpc.ClientDuplexStream<unknown, Snapshot>;
  call.on("data", (s: Snapshot) => s.version && got.push(s));
  call.on("error", () => {});
  call.write({ client: "test", haveVersion: 0 });
  cleanups.push(() => {
    call.cancel();
    conn.close();
  });
  return got;
}

/** The latest endpoint set of one pool's cluster an ADS subscriber (standing in for Envoy) was sent. */
function watchEndpoints(port: number, pool: string): { hosts: () => string[] | undefined } {
  const cluster = poolClusterName(pool);
  const Client = grpc.makeGenericClientConstructor(createDiscoveryServer({ log: () => {} }).service.definition, "ADS");
  const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const call = (client as unknown as { StreamAggregatedResources(): grpc.ClientDuplexStream<DiscoveryRequest, { nonce: string; version_info: string; resources: any[] }> }).StreamAggregatedResources();
  let hosts: string[] | undefined;
  call.on("data", (r) => {
    const assignment = r.resources.find((a) => a.cluster_name === cluster);
    hosts = (assignment?.endpoints ?? []).flatMap((l: any) => (l.lb_endpoints ?? []).map((e: any) => `${e.endpoint.address.socket_address.address}:${e.endpoint.address.socket_address.port_value}`)).sort();
    call.write({ type_url: r.resources[0]?.["@type"], resource_names: [cluster], version_info: r.version_info, response_nonce: r.nonce });
  });
  call.on("error", () => {});
  call.write({ type_url: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", resource_names: [cluster] });
  cleanups.push(() => {
    call.cancel();
    client.close();
  });
  return { hosts: () => hosts };
}

async function start(yaml: string, opts: Parameters<typeof startAggregator>[1] = {}): Promise<Aggregator> {
  const agg = await startAggregator(parseGatewayConfig(yaml, "test.yaml"), { port: 0, metricsPort: false, log: () => {}, ...opts });
  cleanups.push(() => agg.close());
  return agg;
}

const addresses = (s: Snapshot) => s.pools[0].endpoints.map((e) => e.address).sort();

describe("one snapshot per cycle", () => {
  it("pushes at most once per cycle while every one of 40 pods changes on every scrape", async () => {
    const pods = await Promise.all(Array.from({ length: 40 }, () => startPod((hit) => vllm(hit))));
    const { t, hooks } = recordingTelemetry();
    const pushed: Snapshot[] = [];
    const agg = await start(
      `
aggregator: { host: 127.0.0.1, scrapeIntervalMs: 30, scrapeTimeoutMs: 1000, staleAfterMs: 1000 }
pools: [{ name: p, baseModel: m, endpoints: [${pods.map((p) => `"127.0.0.1:${p.port}"`).join(", ")}] }]
`,
      { telemetry: hooks },
    );
    agg.onSnapshot((s) => pushed.push(s));
    const streamed = watch(agg.grpcPort);
    // Pods' changes per push: every pod is scraped in a cycle, and each scrape changes its queue.
    const moved = () => pushed.slice(1).map((s, i) => s.pools[0].endpoints.filter((e, j) => e.waiting !== pushed[i].pools[0].endpoints[j].waiting).length);
    // A loaded machine may spread a cycle's scrapes over the next ones (a cycle ends at the
    // next tick at the latest): wait for a cycle whose scrapes all landed in it.
    await waitFor("10 cycles, and a push carrying 30 pods' changes", () => t.cycles.length >= 10 && Math.max(0, ...moved()) >= 30);
    const cycles = t.cycles.length;
    const pushes = pushed.length;

    // Each cycle's end pushes once (the first snapshot came before any cycle)...
    expect(pushes).toBeGreaterThan(0);
    expect(pushes).toBeLessThanOrEqual(cycles + 1);
    expect(t.pushes.length).toBe(pushes);
    // ...carrying many pods' changes at once.
    expect(Math.max(...moved())).toBeGreaterThanOrEqual(30);
    // Watch streams get the same snapshots, each once.
    await waitFor("the stream to catch up", () => streamed.some((s) => s.version === pushed[pushes - 1].version));
    const versions = streamed.map((s) => s.version);
    expect(new Set(versions).size).toBe(versions.length);
    // The telemetry's size is the encoded snapshot's.
    expect(t.pushes[0].bytes).toBe(encodeSnapshot(pushed[0]).length);
    expect(t.pushes.every((p) => p.delayMs >= 0)).toBe(true);
    // Scrapes per cycle follow the pods: 40 a cycle, not a multiple.
    const scrapes = t.scrapes.length;
    expect(scrapes).toBeLessThanOrEqual(40 * (t.cycles.length + 2));
    expect(t.cycles.every((c) => c.intervalMs >= 30 && c.cpuMs >= 0)).toBe(true);
  });
});

describe("pods from a DNS name", () => {
  it("makes a name with 3 addresses 3 endpoints; when its answers change, Envoy's endpoints and the snapshot follow, and a removed pod is no longer scraped", async () => {
    const first = await startPod(() => vllm(1), "127.0.0.1");
    const port = first.port;
    const [second, third, fourth] = await Promise.all(["127.0.0.2", "127.0.0.3", "127.0.0.4"].map((host) => startPod(() => vllm(2), host, port)));
    let answer = ["127.0.0.1", "127.0.0.2", "127.0.0.3"];
    const { t, hooks } = recordingTelemetry();
    const agg = await start(
      `
aggregator: { host: 127.0.0.1, scrapeIntervalMs: 20, scrapeTimeoutMs: 150, staleAfterMs: 200 }
pools: [{ name: p, baseModel: m, endpoints: [{ address: "pods.test:${port}", capacity: 2 }] }]
`,
      { telemetry: hooks, lookup: async () => answer.map((address) => ({ address, family: 4 })) },
    );
    const eds = watchEndpoints(agg.grpcPort, "p");
    const three = answer.map((ip) => `${ip}:${port}`);
    expect(addresses(agg.current())).toEqual(three);
    // Fresh once scraped (again, if a loaded machine stalled the scrapes past staleAfterMs).
    await waitFor("the three pods fresh, each with the name's capacity", () => agg.current().pools[0].endpoints.every((e) => e.fresh && e.capacity === 2));
    expect(await waitFor("Envoy's endpoints", () => eds.hosts())).toEqual(three);
    expect(t.discovery).toEqual([["p", "added"], ["p", "added"], ["p", "added"]]);

    // The pod on .2 goes away and one on .4 takes its place: the aggregator,
    // seeing .2 stop answering, has the name looked up again.
    answer = ["127.0.0.1", "127.0.0.3", "127.0.0.4"];
    second.body = () => "not metrics";
    const moved = answer.map((ip) => `${ip}:${port}`);
    await waitFor("the snapshot to follow", () => addresses(agg.current()).join() === moved.join());
    await waitFor("Envoy's endpoints to follow", () => eds.hosts()?.join() === moved.join());
    await waitFor("the new pod fresh", () => agg.current().pools[0].endpoints.find((e) => e.address === `127.0.0.4:${port}`)?.fresh);
    expect(fourth.hits).toBeGreaterThan(0);
    expect(t.discovery.slice(3).sort()).toEqual([["p", "added"], ["p", "removed"]]);
    expect(t.scrapes.filter((s) => s.pod === `pods.test:${port}@127.0.0.2`).some((s) => s.error === "parse")).toBe(true);

    // No more scrapes of the removed pod (one may have been in flight), while the others go on.
    const hits = second.hits;
    const thirdHits = third.hits;
    await waitFor("10 more scrapes of another pod", () => third.hits >= thirdHits + 10);
    expect(second.hits).toBeLessThanOrEqual(hits + 1);
  });
});

describe("telemetry", () => {
  it("names why scrapes fail: refused, http_NNN, timeout, parse", async () => {
    const ok = (await startPod(() => vllm(1))).port;
    const http500 = await listen((_req, res) => res.writeHead(500).end());
    const hang = await listen(() => {});
    const junk = (await startPod(() => "tgi_queue_size 1\n")).port;
    const refused = await closedPort();
    const { t, hooks } = recordingTelemetry();
    await start(
      `
aggregator: { host: 127.0.0.1, scrapeIntervalMs: 20, scrapeTimeoutMs: 100, staleAfterMs: 300 }
pools: [{ name: p, baseModel: m, endpoints: [${[ok, http500, hang, junk, refused].map((port) => `"127.0.0.1:${port}"`).join(", ")}] }]
`,
      { telemetry: hooks },
    );
    const kinds = (port: number) => new Set(t.scrapes.filter((s) => s.pod === `127.0.0.1:${port}`).map((s) => s.error));
    const ports = [ok, http500, hang, junk, refused];
    const expected = [null, "http_500", "timeout", "parse", "refused"];
    // Each pod's own kind, though on a loaded machine any scrape may also time out.
    await waitFor("every pod scraped with its kind", () => ports.every((port, i) => kinds(port).has(expected[i])));
    ports.forEach((port, i) => expect([...kinds(port)].filter((k) => k !== "timeout" && k !== expected[i]), `port ${port}`).toEqual([]));
    expect(t.scrapes.every((s) => s.pool === "p")).toBe(true);
  });
});

describe("the scrape interval", () => {
  it("stays at the configured one while a cycle costs less than CORE_SHARE of it, and grows with the cost, up to half of staleAfterMs", () => {
    const min = 50;
    const max = 500;
    expect(adaptInterval(50, 50 * CORE_SHARE, min, max)).toBe(50);
    expect(adaptInterval(50, 100, min, max)).toBe(200); // 100 ms of CPU needs 200 ms at half a core
    expect(adaptInterval(200, 110, min, max)).toBe(200); // within the hysteresis band: no flapping
    expect(adaptInterval(200, 60, min, max)).toBe(120);
    expect(adaptInterval(120, 20, min, max)).toBe(50); // cheap again: back to the configured one
    expect(adaptInterval(50, 10_000, min, max)).toBe(500); // never so long that pods go stale
  });
});
