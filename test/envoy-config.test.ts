import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import {
  allocateBaseId,
  BUFFER_SLACK_BYTES,
  findEnvoy,
  renderEnvoyConfig,
  startEnvoy,
  validateEnvoyConfig,
  type EnvoyConfigParams,
  type EnvoyProcess,
} from "../host/envoy/index.js";
import { filterWasmPath, projectRoot } from "../host/paths.js";

const params: EnvoyConfigParams = {
  gatewayHost: "127.0.0.1",
  gatewayPort: 8080,
  adminPort: 0,
  aggregatorHost: "127.0.0.1",
  aggregatorPort: 50051,
  wasmPath: "/opt/some dir/filter.wasm",
  maxBodyBytes: 4 * 1024 * 1024,
};

// The rendered bootstrap is walked loosely in assertions.
type Doc = any;

describe("renderEnvoyConfig", () => {
  const doc: Doc = parseYaml(renderEnvoyConfig(params));
  const wasmFilterConfig = () => {
    const hcm = doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
    return hcm.http_filters[0].typed_config.config;
  };

  it("puts admin on loopback with the given port", () => {
    expect(doc.admin.address.socket_address).toEqual({ address: "127.0.0.1", port_value: 0 });
  });

  it("declares the singleton Wasm service that links to the aggregator", () => {
    const [ext] = doc.bootstrap_extensions;
    expect(ext.name).toBe("envoy.bootstrap.wasm");
    expect(ext.typed_config["@type"]).toBe("type.googleapis.com/envoy.extensions.wasm.v3.WasmService");
    expect(ext.typed_config.singleton).toBe(true);
    const cfg = ext.typed_config.config;
    expect(cfg.name).toBe("llm_gateway_link");
    expect(cfg.root_id).toBe("llm_gateway_link");
    expect(cfg.vm_config).toEqual({
      vm_id: "llm-gateway",
      runtime: "envoy.wasm.runtime.v8",
      code: { local: { filename: "/opt/some dir/filter.wasm" } },
    });
    expect(cfg.configuration["@type"]).toBe("type.googleapis.com/google.protobuf.StringValue");
    expect(JSON.parse(cfg.configuration.value)).toEqual({ aggregator_cluster: "llm_gateway_aggregator" });
  });

  it("builds the listener: buffer limit with slack, HCM, catch-all streaming route", () => {
    const [listener] = doc.static_resources.listeners;
    expect(listener.address.socket_address).toEqual({ address: "127.0.0.1", port_value: 8080 });
    expect(listener.per_connection_buffer_limit_bytes).toBe(params.maxBodyBytes + BUFFER_SLACK_BYTES);
    expect(BUFFER_SLACK_BYTES).toBe(64 * 1024);
    const hcm = listener.filter_chains[0].filters[0].typed_config;
    expect(hcm.stat_prefix).toBe("llm_gateway");
    expect(hcm.codec_type).toBe("AUTO");
    expect(hcm.stream_idle_timeout).toMatch(/^\d+s$/);
    const routes = hcm.route_config.virtual_hosts[0].routes;
    expect(routes).toEqual([{ match: { prefix: "/" }, route: { cluster: "llm_gateway_pods", timeout: "0s" } }]);
    expect(hcm.http_filters.map((f: Doc) => f.name)).toEqual(["envoy.filters.http.wasm", "envoy.filters.http.router"]);
  });

  it("configures the HTTP filter on the same VM as the singleton", () => {
    const cfg = wasmFilterConfig();
    const singleton = doc.bootstrap_extensions[0].typed_config.config;
    expect(cfg.root_id).toBe("llm_gateway");
    expect(cfg.vm_config).toEqual(singleton.vm_config);
    expect(cfg.allow_on_headers_stop_iteration).toBe(true);
    expect(cfg.fail_open).toBe(false);
    expect(JSON.parse(cfg.configuration.value)).toEqual({ max_body_bytes: params.maxBodyBytes });
  });

  it("routes pods by the destination header and reaches the aggregator over HTTP/2", () => {
    const clusters: Doc[] = doc.static_resources.clusters;
    const pods = clusters.find((c) => c.name === "llm_gateway_pods");
    expect(pods.type).toBe("ORIGINAL_DST");
    expect(pods.lb_policy).toBe("CLUSTER_PROVIDED");
    expect(pods.original_dst_lb_config).toEqual({
      use_http_header: true,
      http_header_name: "x-gateway-destination-endpoint",
    });
    expect(pods.circuit_breakers.thresholds[0]).toMatchObject({
      max_connections: 100000,
      max_pending_requests: 100000,
      max_requests: 100000,
    });

    const agg = clusters.find((c) => c.name === "llm_gateway_aggregator");
    expect(agg.type).toBe("STRICT_DNS");
    const opts = agg.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
    expect(opts.explicit_http_config).toHaveProperty("http2_protocol_options");
    expect(agg.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address).toEqual({
      address: "127.0.0.1",
      port_value: 50051,
    });
  });

  it("keeps DNS names for the aggregator (docker-compose service names)", () => {
    const d: Doc = parseYaml(renderEnvoyConfig({ ...params, aggregatorHost: "aggregator" }));
    const agg = d.static_resources.clusters.find((c: Doc) => c.name === "llm_gateway_aggregator");
    expect(agg.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address).toBe("aggregator");
  });

  it("rejects bad parameters", () => {
    expect(() => renderEnvoyConfig({ ...params, wasmPath: "build/filter.wasm" })).toThrow(/absolute/);
    expect(() => renderEnvoyConfig({ ...params, gatewayPort: 70000 })).toThrow(/gatewayPort/);
    expect(() => renderEnvoyConfig({ ...params, aggregatorPort: 0 })).toThrow(/aggregatorPort/);
    expect(() => renderEnvoyConfig({ ...params, maxBodyBytes: 1.5 })).toThrow(/maxBodyBytes/);
    expect(() => renderEnvoyConfig({ ...params, gatewayHost: "a b" })).toThrow(/gatewayHost/);
  });

  it("fails on a placeholder it has no value for", () => {
    expect(() => renderEnvoyConfig(params, "a: ${ADMIN_PORT}\nb: ${NOPE}\nc: ${NOPE}\n")).toThrow(
      /unreplaced placeholders.*\$\{NOPE\}$/,
    );
  });
});

describe("findEnvoy", () => {
  const scratch = mkdtempSync(join(tmpdir(), "find-envoy-test-"));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it("prefers ENVOY_BIN", () => {
    const fake = join(scratch, "my-envoy");
    writeFileSync(fake, "#!/bin/sh\n");
    chmodSync(fake, 0o755);
    expect(findEnvoy({ ENVOY_BIN: fake, PATH: "" })).toBe(fake);
    expect(() => findEnvoy({ ENVOY_BIN: join(scratch, "missing"), PATH: "" })).toThrow(/ENVOY_BIN/);
  });

  it("uses the project venv (npm run setup:envoy)", () => {
    expect(findEnvoy({ PATH: "" })).toBe(join(projectRoot, ".venv", "bin", "envoy"));
  });

  it("falls back to PATH, and names all three places when nothing is found", () => {
    const binDir = join(scratch, "bin");
    const noVenv = join(scratch, "project");
    rmSync(binDir, { recursive: true, force: true });
    expect(() => findEnvoy({ PATH: binDir }, noVenv)).toThrow(/ENVOY_BIN.*\.venv\/bin\/envoy.*PATH/s);
    writeFileSync(join(scratch, "envoy"), "#!/bin/sh\n");
    chmodSync(join(scratch, "envoy"), 0o755);
    expect(findEnvoy({ PATH: `${binDir}:${scratch}` }, noVenv)).toBe(join(scratch, "envoy"));
  });
});

describe("allocateBaseId", () => {
  it("hands out distinct ids inside Envoy's range", () => {
    const ids = Array.from({ length: 50 }, () => allocateBaseId());
    expect(new Set(ids).size).toBe(ids.length);
    for (const id of ids) {
      expect(Number.isInteger(id)).toBe(true);
      expect(id).toBeGreaterThanOrEqual(0);
      // base_id * 10 must fit in a uint32.
      expect(id * 10).toBeLessThanOrEqual(0xffffffff);
    }
  });
});

// A throwaway bootstrap without our filter: a loopback listener that answers
// every TCP connection with a fixed string.
const minimalConfig = (text: string) => `
admin:
  address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
static_resources:
  listeners:
    - name: hello
      address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
      filter_chains:
        - filters:
            - name: envoy.filters.network.direct_response
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.direct_response.v3.Config
                response: { inline_string: ${JSON.stringify(text)} }
`;

function readFromListener(hostPort: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const [host, port] = hostPort.split(":");
    const socket = connect({ host, port: Number(port) });
    let data = "";
    socket.setEncoding("utf8").on("data", (c: string) => (data += c));
    socket.on("end", () => resolve(data));
    socket.on("error", reject);
  });
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("startEnvoy", () => {
  const started: EnvoyProcess[] = [];
  afterAll(async () => {
    await Promise.all(started.map((e) => e.stop()));
  });

  it("starts two instances side by side, reports addresses and stats, and stops cleanly", async () => {
    const lines: string[] = [];
    const [a, b] = await Promise.all([
      startEnvoy({ configYaml: minimalConfig("A"), logLevel: "info", onLog: (l) => lines.push(l) }),
      startEnvoy({ configYaml: minimalConfig("B"), concurrency: 2 }),
    ]);
    started.push(a, b);

    expect(a.baseId).not.toBe(b.baseId);
    expect(a.adminUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(a.adminUrl).not.toBe(b.adminUrl);
    expect(await (await fetch(`${a.adminUrl}/ready`)).text()).toBe("LIVE\n");

    expect(Object.keys(a.listenerAddresses)).toEqual(["hello"]);
    expect(await readFromListener(a.listenerAddresses.hello)).toBe("A");
    expect(await readFromListener(b.listenerAddresses.hello)).toBe("B");

    const stats = await a.stats("^server\\.(live|concurrency)$");
    expect(stats).toEqual({ "server.live": 1, "server.concurrency": 1 });
    expect((await b.stats("^server\\.concurrency$"))["server.concurrency"]).toBe(2);

    // onLog saw Envoy's startup lines, and the ring buffer kept them.
    expect(lines.some((l) => l.includes("starting main dispatch loop"))).toBe(true);
    expect(a.recentLogs().length).toBeGreaterThan(0);

    // The config lives in a temp dir named on the command line; stop() removes it.
    const cmdline = readFileSync(`/proc/${a.pid}/cmdline`, "utf8").split("\0");
    const configPath = cmdline[cmdline.indexOf("-c") + 1];
    expect(cmdline).toContain("--disable-hot-restart");
    expect(cmdline[cmdline.indexOf("--base-id") + 1]).toBe(String(a.baseId));
    expect(existsSync(configPath)).toBe(true);

    await a.stop();
    await a.stop(); // idempotent
    expect(isRunning(a.pid)).toBe(false);
    expect(existsSync(configPath)).toBe(false);
    await expect(fetch(`${a.adminUrl}/ready`)).rejects.toThrow();
  }, 30_000);

  it("rejects with Envoy's last log lines when it exits during startup", async () => {
    const bad = "static_resources:\n  clusters:\n    - name: broken\n      type: NOT_A_TYPE\n";
    await expect(startEnvoy({ configYaml: bad })).rejects.toThrow(/exited during startup[\s\S]*NOT_A_TYPE/);
  }, 30_000);
});

describe("validateEnvoyConfig", () => {
  it("accepts a valid bootstrap and rejects a broken one with Envoy's reason", async () => {
    await validateEnvoyConfig(minimalConfig("x"));
    await expect(validateEnvoyConfig("admin: { nonsense: 1 }\n")).rejects.toThrow(/rejected the config[\s\S]*nonsense/);
  }, 30_000);

  // build/filter.wasm comes from `npm run build`, which `npm test` runs first.
  // Validate mode really loads the module into V8, so this also checks that
  // the filter's imports and exports suit Envoy.
  it("accepts the rendered gateway config with the built filter", async () => {
    expect(existsSync(filterWasmPath), `${filterWasmPath} missing: run npm run build`).toBe(true);
    await validateEnvoyConfig(renderEnvoyConfig({ ...params, wasmPath: filterWasmPath }));
  }, 30_000);
});
