// The filter-overhead benchmark's harness: configs, bodies, and a tiny real run
// (Envoy with and without the filter, autocannon, the upstream child). Checks
// correctness only, never speed. The upstream child runs from dist/, so this
// needs `npm run build` (which `npm test` runs first).
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { baselineEnvoyConfig, POOL_HEADER } from "../../bench/baseline-envoy.js";
import { overheadMarkdown, runOverhead } from "../../bench/overhead/index.js";
import { BENCH_MODEL, chatBody } from "../../bench/overhead/workload.js";
import { renderEnvoyConfig } from "../../host/envoy/index.js";
import { validateEnvoyConfig } from "../../testing/launcher/envoy-process.js";
import { filterWasmPath } from "../../host/paths.js";

const rendered = renderEnvoyConfig({
  gatewayHost: "127.0.0.1",
  gatewayPort: 0,
  adminPort: 0,
  aggregatorHost: "127.0.0.1",
  aggregatorPort: 9999,
  wasmPath: filterWasmPath,
  maxBodyBytes: 4 * 1024 * 1024,
  pools: ["llama", "qwen"],
});

describe("baseline Envoy (without the filter)", () => {
  const upstreams = ["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"];
  const yaml = baselineEnvoyConfig(rendered, [{ name: "pods", endpoints: upstreams }], "ROUND_ROBIN");

  it("drops the Wasm service, the filter and ADS, and round-robins over the upstreams, keeping the rest", () => {
    expect(yaml).not.toMatch(/wasm/i);
    const withFilter = parse(rendered);
    const without = parse(yaml);
    expect(without).not.toHaveProperty("dynamic_resources");
    const hcm = (cfg: any) => cfg.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
    expect(hcm(without).http_filters.map((f: { name: string }) => f.name)).toEqual(["envoy.filters.http.buffer", "envoy.filters.http.router"]);
    const { http_filters: _a, route_config: routesWith, ...restWith } = hcm(withFilter);
    const { http_filters: _b, route_config: routesWithout, ...restWithout } = hcm(without);
    expect(restWithout).toEqual(restWith);
    const listener = (cfg: any) => ({ ...cfg.static_resources.listeners[0], filter_chains: null });
    expect(listener(without)).toEqual(listener(withFilter));

    // The two pool routes and their stream twins become one route that needs
    // no pool header (and no stream header: nothing sets it); the rest of the table stays.
    const [poolRoute, ...rest] = routesWithout.virtual_hosts[0].routes;
    const [, llamaRoute, , , ...restWith2] = routesWith.virtual_hosts[0].routes;
    expect(llamaRoute.match.headers.map((h: { name: string }) => h.name)).toEqual([":method", "x-gateway-pool"]);
    // The rest stays, less the per-route switch for the filter that is gone (CONNECT's route).
    const withoutWasmSwitch = (routes: any[]) =>
      routes.map(({ typed_per_filter_config: perFilter, ...route }) => {
        if (!perFilter) return route;
        const { "envoy.filters.http.wasm": _wasm, ...others } = perFilter;
        return { ...route, typed_per_filter_config: others };
      });
    expect(rest).toEqual(withoutWasmSwitch(restWith2));
    expect(poolRoute.match).toEqual({ ...llamaRoute.match, headers: [{ name: ":method", string_match: { exact: "POST" } }] });
    expect(poolRoute.route).toEqual({ ...llamaRoute.route, cluster: "llm_gateway_pool_pods" });

    const clusters = without.static_resources.clusters;
    expect(clusters.map((c: { name: string }) => c.name)).toEqual(["llm_gateway_pool_pods", "llm_gateway_aggregator"]);
    const pods = clusters[0];
    expect(pods.type).toBe("STATIC");
    expect(pods.lb_policy).toBe("ROUND_ROBIN");
    expect(pods).not.toHaveProperty("load_balancing_policy");
    expect(pods).not.toHaveProperty("eds_cluster_config");
    const llama = withFilter.static_resources.clusters.find((c: { name: string }) => c.name === "llm_gateway_pool_llama");
    expect(pods.circuit_breakers).toEqual(llama.circuit_breakers);
    expect(pods.outlier_detection).toEqual(llama.outlier_detection);
    const ports = pods.load_assignment.endpoints[0].lb_endpoints.map((e: any) => e.endpoint.address.socket_address.port_value);
    expect(ports).toEqual([9001, 9002, 9003]);
  });

  it("is accepted by envoy --mode validate", async () => {
    await validateEnvoyConfig(yaml);
  });

  it("fails loudly if the template no longer has what it removes", () => {
    expect(() => baselineEnvoyConfig(yaml, [{ name: "pods", endpoints: upstreams }], "ROUND_ROBIN")).toThrow(/envoy.bootstrap.wasm/);
  });

  it("routes several pools by header, each with the chosen load balancer", async () => {
    const multi = baselineEnvoyConfig(rendered, [{ name: "a", endpoints: upstreams.slice(0, 2) }, { name: "b", endpoints: upstreams.slice(2) }], "LEAST_REQUEST");
    const cfg = parse(multi);
    const clusters = cfg.static_resources.clusters.filter((c: { name: string }) => c.name.startsWith("llm_gateway_pool_"));
    expect(clusters.map((c: { name: string; lb_policy: string }) => [c.name, c.lb_policy])).toEqual([
      ["llm_gateway_pool_a", "LEAST_REQUEST"],
      ["llm_gateway_pool_b", "LEAST_REQUEST"],
    ]);
    const routes = cfg.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes;
    const poolRoutes = routes.filter((r: any) => r.route?.cluster);
    expect(poolRoutes.map((r: any) => [r.match.headers[1].name, r.match.headers[1].string_match.exact, r.route.cluster])).toEqual([
      [POOL_HEADER, "a", "llm_gateway_pool_a"],
      [POOL_HEADER, "b", "llm_gateway_pool_b"],
    ]);
    await validateEnvoyConfig(multi);
  });
});

describe("overhead bench: the request body", () => {
  it.each([4096, 65536])("is a chat request of exactly %i bytes", (size) => {
    const body = chatBody(size);
    expect(Buffer.byteLength(body)).toBe(size);
    const json = JSON.parse(body);
    expect(json.model).toBe(BENCH_MODEL);
    expect(json.messages.at(-1).role).toBe("user");
  });
});

describe("overhead bench: a tiny run", () => {
  it("answers every request with 200 in both modes, spreads the filter's picks, and reports every cell", async () => {
    const lines: string[] = [];
    const report = await runOverhead({ durationS: 1, bodySizes: [4096], endpointCounts: [8], onProgress: (l) => lines.push(l) });

    expect(report.cells).toHaveLength(1);
    const cell = report.cells[0];
    expect([cell.bodyBytes, cell.endpoints]).toEqual([4096, 8]);
    for (const mode of [cell.withFilter, cell.withoutFilter]) {
      for (const run of [mode.latency, mode.saturation]) {
        expect(run.segments).toBe(2);
        expect(run.requests).toBeGreaterThan(0);
        expect(run.ok).toBe(run.requests);
        expect(run.non2xx).toBe(0);
        expect(run.errors).toBe(0);
        expect(run.latencyMs.samples).toBe(run.ok);
        // Requests still in flight when autocannon stops reach the upstream but are not counted by it.
        expect(run.spread.totalHits).toBeGreaterThanOrEqual(run.ok);
      }
    }
    expect(cell.withoutFilter.latency.spread.endpointsHit).toBe(8);
    // Every request repeats one prompt: the filter keeps it on the pods that
    // hold its prefix, and spreads it further only once their load passes the bound.
    expect(cell.withFilter.latency.spread.endpointsHit).toBeLessThan(8);
    expect(cell.withFilter.saturation.spread.endpointsHit).toBeGreaterThan(1);
    expect(cell.withFilter.latency.connections).toBe(1);
    expect(cell.withFilter.saturation.connections).toBe(16);
    expect(Number.isFinite(cell.throughputRatio)).toBe(true);
    expect(Number.isFinite(cell.addedLatencyMs.p50)).toBe(true);

    expect(report.native.map((n) => n.endpoints)).toEqual([1, 8]);
    for (const n of report.native) expect(n.p50Us).toBeGreaterThan(0);

    expect(JSON.parse(JSON.stringify(report))).toEqual(report);
    const md = overheadMarkdown(report);
    expect(md).toContain("npm run bench -- --overhead");
    expect(md).toContain("| 4 KiB | 8 |");
    expect(md).not.toContain("Failed requests");
    expect(lines.some((l) => l.includes("saturation"))).toBe(true);
  }, 40_000);
});
