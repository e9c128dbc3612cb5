// Envoy's half of per-request deadlines, on a real Envoy with the rendered
// gateway config and the aggregator's discovery server for endpoints: a try
// the filter's per-try deadline cuts moves to the next pod; a stream that
// stalls is cut after the profile's streamIdleMs (and, before its first
// byte, moved too); a non-streamed answer has no idle bound; a client's own
// x-envoy-* timeout and retry headers do nothing; pods the aggregator marks
// UNHEALTHY are left to override_host alone.
//
// The Wasm filter does not set the per-try deadline or x-gateway-stream yet,
// so a stand-in does its part: Envoy's header_mutation HTTP filter, in its
// place before the router (after the connection manager stripped client
// headers), copies test headers into x-envoy-upstream-rq-per-try-timeout-ms
// and x-gateway-destination-endpoint; and the route table starts with copies
// of the rendered pool route and its stream twin that match x-test-pool and
// x-test-stream instead of x-gateway-pool and x-gateway-stream (which a
// client cannot send), with the rendered route actions as they are.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isMap, isSeq, parseDocument, type Node } from "yaml";
import { startSnapshotServer, type SnapshotServer } from "../../host/aggregator/push.js";
import { createDiscoveryServer, type DiscoveryServer } from "../../host/aggregator/xds.js";
import { parseGatewayConfig } from "../../host/config.js";
import { envoyParamsFromGatewayConfig, POOL_HEADER, renderEnvoyConfig, STREAM_HEADER } from "../../host/envoy/index.js";
import { startEnvoy, type EnvoyProcess } from "../../testing/launcher/envoy-process.js";
import { filterWasmPath } from "../../host/paths.js";
import { waitFor } from "../helpers/stack.js";

const IDLE_MS = 400;
const PER_TRY_MS = 300;
/** The slow pod answers after this long, sending nothing before. */
const SLOW_MS = 3 * IDLE_MS;
const CLUSTER = "llm_gateway_pool_p";

interface TestPod {
  name: string;
  address: string;
  /** Requests that reached it. */
  hits: number;
  /** Each request's socket: when its last byte was written and when it closed (Date.now()). */
  sockets: Array<{ lastWriteMs: number; closedMs?: number }>;
  close(): Promise<void>;
}

/** A pod that answers `behave`'s way once the request body is in. */
async function startPod(name: string, behave: (res: http.ServerResponse, wrote: () => void) => void): Promise<TestPod> {
  const server = http.createServer((req, res) => {
    pod.hits++;
    const socket = { lastWriteMs: Date.now(), closedMs: undefined as number | undefined };
    pod.sockets.push(socket);
    req.socket.on("close", () => (socket.closedMs = Date.now()));
    req.resume();
    req.on("end", () => behave(res, () => (socket.lastWriteMs = Date.now())));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const pod: TestPod = {
    name,
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits: 0,
    sockets: [],
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
  return pod;
}

const answer = (name: string) => (res: http.ServerResponse) => {
  res.writeHead(200, { "content-type": "application/json", "x-served-by": name });
  res.end(JSON.stringify({ object: "chat.completion", choices: [] }));
};

/**
 * The rendered config with the stand-in for the filter (see the top), and the
 * listener taking loopback clients as internal: Envoy would then honour their
 * x-envoy-* headers, so only our early_header_mutation stops them.
 */
function testConfig(rendered: string, opts: { stripEnvoyHeaders: boolean }): string {
  const doc = parseDocument(rendered);
  const hcm = ["static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config"];
  const routes = doc.getIn([...hcm, "route_config", "virtual_hosts", 0, "routes"]);
  const filters = doc.getIn([...hcm, "http_filters"]);
  if (!isSeq(routes) || !isSeq(filters)) throw new Error("unexpected rendering");
  const renamed: Record<string, string> = { [POOL_HEADER]: "x-test-pool", [STREAM_HEADER]: "x-test-stream" };
  const testRoutes = routes.items.flatMap((item) => {
    const route = (item as Node).toJSON() as { match: { headers?: Array<{ name: string }> } };
    if (!route.match.headers?.some((h) => h.name === POOL_HEADER)) return [];
    route.match.headers = route.match.headers.map((h) => ({ ...h, name: renamed[h.name] ?? h.name }));
    return [doc.createNode(route)];
  });
  routes.items.unshift(...testRoutes);
  const copy = (to: string, from: string) => ({
    append: { header: { key: to, value: `%REQ(${from})%` }, append_action: "OVERWRITE_IF_EXISTS_OR_ADD", keep_empty_value: false },
  });
  filters.items.splice(filters.items.length - 1, 0, doc.createNode({
    name: "envoy.filters.http.header_mutation",
    typed_config: {
      "@type": "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
      mutations: {
        request_mutations: [
          copy("x-envoy-upstream-rq-per-try-timeout-ms", "x-test-per-try-ms"),
          copy("x-gateway-destination-endpoint", "x-test-destination"),
        ],
      },
    },
  }));
  doc.setIn([...hcm, "use_remote_address"], true);
  doc.setIn([...hcm, "internal_address_config"], doc.createNode({ cidr_ranges: [{ address_prefix: "127.0.0.0", prefix_len: 8 }] }));
  if (!opts.stripEnvoyHeaders) {
    const mutations = doc.getIn([...hcm, "early_header_mutation_extensions", 0, "typed_config", "mutations"]);
    if (!isSeq(mutations)) throw new Error("unexpected rendering");
    mutations.items = mutations.items.filter((m) => !(isMap(m) && JSON.stringify(m.toJSON()).includes('"x-envoy-"')));
  }
  return doc.toString();
}

interface Reply {
  status: number;
  servedBy: string | null;
  /** The body, or why it broke off. */
  body: string;
  error?: string;
  ms: number;
}

async function post(envoy: EnvoyProcess, headers: Record<string, string>): Promise<Reply> {
  const started = Date.now();
  const r = await fetch(`http://${envoy.listenerAddresses.llm_gateway}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-test-pool": "p", ...headers },
    body: JSON.stringify({ model: "m", messages: [] }),
    // A bound on a test that fails: every answer here comes within a few seconds.
    signal: AbortSignal.timeout(10_000),
  });
  let body = "";
  let error: string | undefined;
  try {
    const reader = r.body!.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      body += Buffer.from(value).toString();
    }
  } catch (err) {
    error = (err as Error).message;
  }
  return { status: r.status, servedBy: r.headers.get("x-served-by"), body, error, ms: Date.now() - started };
}

describe("per-try deadlines, stream idle timeouts and host health on a real Envoy", () => {
  let discovery: DiscoveryServer;
  let server: SnapshotServer;
  let envoy: EnvoyProcess;
  let pods: Record<"hang" | "good" | "stall" | "slow", TestPod>;
  const stat = async (name: string) => (await envoy.stats(`^cluster\\.${CLUSTER}\\.${name}$`))[`cluster.${CLUSTER}.${name}`];
  const config = parseGatewayConfig(`
pools: [{ name: p, baseModel: m, endpoints: ["127.0.0.1:1"] }]
profiles: { latency: { deadlines: { streamIdleMs: ${IDLE_MS} } } }
`);
  const params = { ...envoyParamsFromGatewayConfig(config, { wasmPath: filterWasmPath }), gatewayPort: 0, adminPort: 0, wasmFilter: false };

  beforeAll(async () => {
    pods = {
      // Takes the request and never answers.
      hang: await startPod("hang", () => {}),
      good: await startPod("good", answer("good")),
      // Starts a stream, sends one event, then nothing.
      stall: await startPod("stall", (res, wrote) => {
        res.writeHead(200, { "content-type": "text/event-stream", "x-served-by": "stall" });
        res.write('data: {"choices":[]}\n\n', wrote);
      }),
      slow: await startPod("slow", (res) => setTimeout(() => answer("slow")(res), SLOW_MS)),
    };
    discovery = createDiscoveryServer({ log: () => {} });
    discovery.setEndpoints(new Map([["p", Object.values(pods).map((p) => p.address)]]));
    server = await startSnapshotServer({
      host: "127.0.0.1",
      port: 0,
      current: () => ({ version: 1, models: [], pools: [], generatedUnixMs: 0 }),
      log: () => {},
      services: [discovery.service],
    });
    envoy = await startEnvoy({ configYaml: testConfig(renderEnvoyConfig({ ...params, aggregatorPort: server.port }), { stripEnvoyHeaders: true }) });
  });
  afterAll(async () => {
    await envoy?.stop();
    discovery?.close();
    await server?.close();
    await Promise.all(Object.values(pods ?? {}).map((p) => p.close()));
  });

  it("retries a try cut by the filter's per-try deadline on the next pod, though the route has no timeout", async () => {
    const route = (parseDocument(renderEnvoyConfig({ ...params, aggregatorPort: 1 })).toJSON() as any).static_resources.listeners[0]
      .filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes[1].route;
    expect(route.timeout).toBe("0s");
    const [hangHits, cut] = [pods.hang.hits, await stat("upstream_rq_per_try_timeout")];
    const r = await post(envoy, { "x-test-destination": `${pods.hang.address},${pods.good.address}`, "x-test-per-try-ms": String(PER_TRY_MS) });
    expect(r).toMatchObject({ status: 200, servedBy: "good" });
    expect(r.ms).toBeGreaterThanOrEqual(PER_TRY_MS);
    expect(pods.hang.hits).toBe(hangHits + 1);
    expect(await stat("upstream_rq_per_try_timeout")).toBe(cut + 1);
  });

  it("cuts a stream that stalls after streamIdleMs of silence, on the stream route only", async () => {
    const idleCuts = await stat("upstream_rq_per_try_idle_timeout");
    const r = await post(envoy, { "x-test-stream": "1", "x-test-destination": pods.stall.address });
    expect(r).toMatchObject({ status: 200, servedBy: "stall", body: 'data: {"choices":[]}\n\n' });
    expect(r.error).toBeDefined(); // the stream broke off instead of ending
    const socket = pods.stall.sockets.at(-1)!;
    await waitFor("the stalled pod's connection to close", () => socket.closedMs !== undefined);
    const silence = socket.closedMs! - socket.lastWriteMs;
    expect(silence).toBeGreaterThanOrEqual(IDLE_MS - 10);
    expect(silence).toBeLessThan(IDLE_MS + 2_000);
    expect(await stat("upstream_rq_per_try_idle_timeout")).toBe(idleCuts + 1);
  });

  it("moves a stream whose pod sends nothing at all to the next pod after streamIdleMs", async () => {
    const r = await post(envoy, { "x-test-stream": "1", "x-test-destination": `${pods.hang.address},${pods.good.address}` });
    expect(r).toMatchObject({ status: 200, servedBy: "good" });
    expect(r.ms).toBeGreaterThanOrEqual(IDLE_MS);
  });

  it("lets a non-streamed answer take longer than streamIdleMs: it sends nothing until it is done", async () => {
    const r = await post(envoy, { "x-test-destination": pods.slow.address });
    expect(r).toMatchObject({ status: 200, servedBy: "slow" });
    expect(r.ms).toBeGreaterThanOrEqual(SLOW_MS);
  });

  const clientTimeouts = {
    "x-envoy-upstream-rq-per-try-timeout-ms": "50",
    "x-envoy-upstream-rq-timeout-ms": "50",
    "x-envoy-retry-on": "5xx",
    "x-envoy-max-retries": "5",
  };

  it("ignores a client's own x-envoy-* timeout and retry headers, even from a client Envoy takes as internal", async () => {
    const cut = await stat("upstream_rq_per_try_timeout");
    const r = await post(envoy, { ...clientTimeouts, "x-test-destination": `${pods.slow.address},${pods.good.address}` });
    expect(r).toMatchObject({ status: 200, servedBy: "slow" });
    expect(await stat("upstream_rq_per_try_timeout")).toBe(cut);
  });

  it("(control: without the x-envoy-* strip, the same listener would honour them)", async () => {
    const unguarded = await startEnvoy({ configYaml: testConfig(renderEnvoyConfig({ ...params, aggregatorPort: server.port }), { stripEnvoyHeaders: false }) });
    try {
      const r = await post(unguarded, { ...clientTimeouts, "x-test-destination": `${pods.slow.address},${pods.good.address}` });
      // The client's 50 ms cut the slow pod short (504, or a retry on good).
      expect(r.servedBy).not.toBe("slow");
      expect(r.ms).toBeLessThan(SLOW_MS);
    } finally {
      await unguarded.stop();
    }
  });

  it("lets override_host reach a pod marked UNHEALTHY, while the fallback only picks healthy ones; all failing, none is marked", async () => {
    const health = async () => {
      const body = (await (await fetch(`${envoy.adminUrl}/clusters?format=json`)).json()) as { cluster_statuses: any[] };
      const hosts = body.cluster_statuses.find((c) => c.name === CLUSTER).host_statuses ?? [];
      return Object.fromEntries(hosts.map((h: any) => [`${h.address.socket_address.address}:${h.address.socket_address.port_value}`, h.health_status.eds_health_status]));
    };
    const { good, slow } = pods;
    discovery.setEndpoints(new Map([["p", [good.address, slow.address]]]), new Map([["p", new Set([slow.address])]]));
    await waitFor("Envoy to take slow as UNHEALTHY", async () => {
      const h = await health();
      return Object.keys(h).length === 2 && h[good.address] === "HEALTHY" && h[slow.address] === "UNHEALTHY";
    });

    expect(await post(envoy, { "x-test-destination": slow.address })).toMatchObject({ status: 200, servedBy: "slow" });
    const slowHits = slow.hits;
    for (let i = 0; i < 10; i++) expect(await post(envoy, {})).toMatchObject({ status: 200, servedBy: "good" });
    expect(slow.hits).toBe(slowHits);

    // Every pod failing: all HEALTHY, so the fallback still has hosts (with
    // none healthy and no panic routing, Envoy would answer 503).
    discovery.setEndpoints(new Map([["p", [good.address, slow.address]]]), new Map([["p", new Set([good.address, slow.address])]]));
    await waitFor("Envoy to take both as HEALTHY", async () => {
      const h = await health();
      return h[good.address] === "HEALTHY" && h[slow.address] === "HEALTHY";
    });
    expect((await post(envoy, {})).status).toBe(200);
  });
});
