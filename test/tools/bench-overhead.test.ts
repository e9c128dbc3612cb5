// The filter-overhead benchmark's harness: configs, bodies, the floor filter,
// the deterministic counts, and a tiny real run (Envoy with our filter, the
// floor filter and none, autocannon, the upstream child). Checks correctness
// only, never speed. The upstream child runs from dist/, so this needs
// `npm run build` (which `npm test` runs first).
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { createServer, request as httpRequest, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { baselineEnvoyConfig, POOL_HEADER } from "../../bench/baseline-envoy.js";
import { buildFloorFilter, floorEnvoyConfig, FLOOR_HEADER } from "../../bench/floor-envoy.js";
import { countPerRequest } from "../../bench/overhead/counts.js";
import { runOverhead } from "../../bench/overhead/index.js";
import { overheadMarkdown } from "../../bench/overhead/report.js";
import { BENCH_MODEL, chatBody, STREAM_CHUNKS, streamEvents } from "../../bench/overhead/workload.js";
import { renderEnvoyConfig } from "../../host/envoy/index.js";
import { startEnvoy, validateEnvoyConfig } from "../../testing/launcher/envoy-process.js";
import { ProxyWasmHost } from "../../testing/proxy-wasm-emulator/index.js";
import { filterWasmPath } from "../../host/paths.js";

let floorWasm: string;
beforeAll(() => {
  floorWasm = buildFloorFilter();
}, 60_000);

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

const hcmOf = (cfg: any) => cfg.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;

describe("floor Envoy (the minimal buffering filter)", () => {
  const pools = [{ name: "pods", endpoints: ["127.0.0.1:9001", "127.0.0.1:9002"] }];

  it("is the baseline plus the gateway's Wasm filter entry, in its place, with only module, root and configuration swapped", () => {
    const floor = parse(floorEnvoyConfig(rendered, pools, "ROUND_ROBIN", floorWasm));
    const baseline = parse(baselineEnvoyConfig(rendered, pools, "ROUND_ROBIN"));
    const gatewayFilters = hcmOf(parse(rendered)).http_filters;
    const floorFilters = hcmOf(floor).http_filters;
    expect(floorFilters.map((f: { name: string }) => f.name)).toEqual(gatewayFilters.map((f: { name: string }) => f.name));
    const at = floorFilters.findIndex((f: { name: string }) => f.name === "envoy.filters.http.wasm");

    // Take the floor's filter out and what is left is the baseline, byte for byte.
    const { http_filters: _f, ...floorRest } = hcmOf(floor);
    const { http_filters: baselineFilters, ...baselineRest } = hcmOf(baseline);
    expect(floorRest).toEqual(baselineRest);
    expect(floorFilters.filter((_: unknown, i: number) => i !== at)).toEqual(baselineFilters);
    const withoutHcm = (cfg: any) => ({ ...cfg, static_resources: { ...cfg.static_resources, listeners: null } });
    expect(withoutHcm(floor)).toEqual(withoutHcm(baseline));

    const { config: gatewayConfig, ...gatewayEntry } = gatewayFilters[at].typed_config;
    const { config: floorConfig, ...floorEntry } = floorFilters[at].typed_config;
    expect(floorEntry).toEqual(gatewayEntry);
    expect(floorConfig.failure_policy).toBe(gatewayConfig.failure_policy);
    expect(floorConfig.allow_on_headers_stop_iteration).toBe(gatewayConfig.allow_on_headers_stop_iteration);
    expect(floorConfig.root_id).toBe("bench_floor");
    expect(floorConfig.vm_config).toEqual({ ...gatewayConfig.vm_config, vm_id: "bench-floor", code: { local: { filename: floorWasm } } });
  });

  it("is accepted by envoy --mode validate", async () => {
    await validateEnvoyConfig(floorEnvoyConfig(rendered, pools, "ROUND_ROBIN", floorWasm));
  });

  it("holds a chunked body on the emulator until its end, then sets its one header and makes no other host call", () => {
    const host = new ProxyWasmHost(0);
    const vm = host.createVm(new WebAssembly.Module(readFileSync(floorWasm)), { vmId: "bench-floor" });
    const root = vm.startPlugin({ name: "bench_floor", rootId: "bench_floor", configuration: "" });
    vm.resetHostCalls();
    const stream = vm.createStream(root);
    expect(stream.sendHeaders({ ":method": "POST", ":path": "/v1/chat/completions" }, false)).toBe(1); // StopIteration
    expect(stream.sendBody(Buffer.from('{"a":'), false)).toBe(1); // StopIterationAndBuffer
    expect(stream.requestHeaders.get(FLOOR_HEADER)).toBeUndefined();
    expect(stream.sendBody(Buffer.from("1}"), true)).toBe(0); // Continue
    expect(stream.requestHeaders.get(FLOOR_HEADER)).toBe("1");
    expect(Buffer.from(stream.forwardedBody).toString()).toBe('{"a":1}');
    stream.finish({ responseCode: 200 });
    expect(vm.hostCalls()).toEqual({ proxy_replace_header_map_value: 1 });
  });

  it("in a real Envoy, passes a chunked body whole to the upstream with its header set", async () => {
    const seen: Array<{ headers: IncomingHttpHeaders; body: string }> = [];
    const upstream = createServer((req, res) => {
      const parts: Buffer[] = [];
      req.on("data", (d: Buffer) => parts.push(d));
      req.on("end", () => {
        seen.push({ headers: req.headers, body: Buffer.concat(parts).toString() });
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
      });
    });
    await once(upstream.listen(0, "127.0.0.1"), "listening");
    const address = `127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    const envoy = await startEnvoy({ configYaml: floorEnvoyConfig(rendered, [{ name: "pods", endpoints: [address] }], "ROUND_ROBIN", floorWasm) });
    try {
      const body = chatBody(4096);
      const status = await new Promise<number>((resolve, reject) => {
        const [host, port] = envoy.listenerAddresses.llm_gateway.split(":");
        const req = httpRequest({ host, port: Number(port), method: "POST", path: "/v1/chat/completions", headers: { "content-type": "application/json" } }, (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode ?? 0));
        });
        req.on("error", reject);
        // Chunked transfer, three writes: Envoy sees several body frames.
        for (let i = 0; i < 3; i++) req.write(body.slice((i * body.length) / 3, ((i + 1) * body.length) / 3));
        req.end();
      });
      expect(status).toBe(200);
      expect(seen).toHaveLength(1);
      expect(seen[0].headers[FLOOR_HEADER]).toBe("1");
      expect(seen[0].body).toBe(body);
    } finally {
      await envoy.stop();
      upstream.close();
    }
  }, 30_000);
});

describe("overhead bench: deterministic counts", () => {
  it("counts host calls and Wasm instructions per request, the same on two runs, growing with the pool and the stream", async () => {
    const run = () => countPerRequest(4096, [8, 64], 8, () => {});
    const first = await run();
    expect(await run()).toEqual(first);
    const row = (filter: string, endpoints: number, response: string) =>
      first.rows.find((r) => r.filter === filter && r.endpoints === endpoints && r.response === response)!;
    expect(row("floor", 1, "json")).toMatchObject({ hostCalls: 1, hostCallsByImport: { proxy_replace_header_map_value: 1 } });
    const [at8, at64, sse] = [row("ours", 8, "json"), row("ours", 64, "json"), row("ours", 8, "sse")];
    for (const r of [at8, at64, sse]) expect(r.wasmInstructions).toBeGreaterThan(row("floor", 1, "json").wasmInstructions);
    // Scoring walks the pool: more endpoints, more instructions, the same host calls.
    expect(at64.wasmInstructions).toBeGreaterThan(at8.wasmInstructions);
    expect(at64.hostCalls).toBe(at8.hostCalls);
    // The SSE answer passes in one data frame per event.
    expect(sse.hostCalls).toBeGreaterThan(at8.hostCalls + STREAM_CHUNKS);
    expect(streamEvents()).toHaveLength(STREAM_CHUNKS + 3);
    // A collection visits what is live: a larger pool's snapshot makes it dearer.
    const [gc8, gc64] = first.collections.map((c) => c.wasmInstructions);
    expect(gc8).toBeGreaterThan(0);
    expect(gc64).toBeGreaterThan(gc8);
  }, 30_000);
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
  it("answers every request with 200 in all three modes, spreads the filter's picks, and reports every cell", async () => {
    const lines: string[] = [];
    const report = await runOverhead({ durationS: 1, bodySizes: [4096], endpointCounts: [8, 1000], streamedAt: 8, onProgress: (l) => lines.push(l) });

    expect(report.cells.map((c) => [c.bodyBytes, c.endpoints, c.response])).toEqual([
      [4096, 8, "json"],
      [4096, 8, "sse"],
      [4096, 1000, "json"],
    ]);
    for (const cell of report.cells) {
      for (const mode of [cell.withFilter, cell.floorFilter, cell.withoutFilter]) {
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
      for (const mode of [cell.withFilter, cell.floorFilter, cell.withoutFilter]) {
        for (const v of [mode.saturation.requestsPerS, mode.latency.latencyMs.p50, mode.saturation.cpu.envoyUs]) expect(Number.isFinite(v)).toBe(true);
      }
    }
    const [cell] = report.cells;
    // Round-robin behind no filter and the floor alike.
    expect(cell.withoutFilter.latency.spread.endpointsHit).toBe(8);
    expect(cell.floorFilter.latency.spread.endpointsHit).toBe(8);
    // Every request repeats one prompt: the filter keeps it on the pods that
    // hold its prefix, and spreads it further only once their load passes the bound.
    expect(cell.withFilter.latency.spread.endpointsHit).toBeLessThan(8);
    expect(cell.withFilter.saturation.spread.endpointsHit).toBeGreaterThan(1);
    expect(cell.withFilter.latency.connections).toBe(1);
    expect(cell.withFilter.saturation.connections).toBe(16);

    expect(report.native.map((n) => n.endpoints)).toEqual([1, 8, 1000]);
    for (const n of report.native) expect(n.p50Us).toBeGreaterThan(0);
    expect(report.counts.rows.map((r) => [r.filter, r.endpoints, r.response])).toEqual([
      ["floor", 1, "json"],
      ["ours", 8, "json"],
      ["ours", 1000, "json"],
      ["ours", 8, "sse"],
    ]);

    expect(JSON.parse(JSON.stringify(report))).toEqual(report);
    const md = overheadMarkdown(report);
    expect(md).toContain("npm run bench -- --overhead");
    expect(md).toContain(`### Streaming (4 KiB body, 8 endpoints, ${STREAM_CHUNKS}-chunk SSE answer)`);
    for (const row of ["| 4 KiB | 8 | JSON |", "| 4 KiB | 8 | SSE |", "| 4 KiB | 1000 | JSON |", "| ours over floor |", "| floor | — | JSON |", "| ours | 1000 | JSON |"]) {
      expect(md).toContain(row);
    }
    expect(md).not.toContain("Failed requests");
    expect(lines.some((l) => l.includes("saturation") && l.includes("floor filter"))).toBe(true);
    expect(lines.some((l) => /about \d+ min of load/.test(l))).toBe(true);
  }, 150_000);
});
