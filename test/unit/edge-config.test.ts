// The edge fields of the gateway config (gateway.tls, gateway.plaintext,
// gateway.limits, pools[].tls) and how the renderer turns them into Envoy's.
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { ConfigError, parseConfigFile, parseGatewayConfig } from "../../host/config.js";
import { isLoopback } from "../../host/config/edge.js";
import { envoyParamsFromGatewayConfig, listenerSdsFiles, renderEnvoyConfig, renderEnvoyXds, xdsResourcesFromGatewayConfig } from "../../host/envoy/index.js";

const POOLS = `
pools:
  - name: llama
    baseModel: llama-3.1-8b
    endpoints: ["10.0.0.7:8000"]
`;

function issues(text: string): string[] {
  try {
    parseGatewayConfig(text);
  } catch (err) {
    if (err instanceof ConfigError) return err.issues;
    throw err;
  }
  throw new Error("the config was accepted");
}

const TLS = "tls: { certFile: /etc/tls/tls.crt, keyFile: /etc/tls/tls.key }";

describe("plain HTTP fails closed", () => {
  it("refuses a non-loopback listener without gateway.tls, naming the field", () => {
    expect(issues(`gateway: { host: 0.0.0.0 }\n${POOLS}`)).toEqual([
      "gateway.tls: is required when gateway.host (0.0.0.0) is not a loopback address; set gateway.plaintext: true to serve plain HTTP there on purpose",
    ]);
    expect(issues(`gateway: { host: "::" }\n${POOLS}`)[0]).toMatch(/^gateway\.tls: is required/);
    expect(issues(`gateway: { host: gateway.example }\n${POOLS}`)[0]).toMatch(/^gateway\.tls: is required/);
  });

  it("accepts plain HTTP on loopback, or elsewhere when gateway.plaintext says so, and HTTPS anywhere", () => {
    for (const host of ["127.0.0.1", "127.8.9.10", "::1", "localhost"]) expect(parseGatewayConfig(`gateway: { host: "${host}" }\n${POOLS}`).gateway.tls).toBeUndefined();
    expect(parseGatewayConfig(`gateway: { host: 0.0.0.0, plaintext: true }\n${POOLS}`).gateway.plaintext).toBe(true);
    expect(parseGatewayConfig(`gateway: { host: 0.0.0.0, ${TLS} }\n${POOLS}`).gateway.tls).toEqual({ certFile: "/etc/tls/tls.crt", keyFile: "/etc/tls/tls.key", requireClientCert: false });
    expect(isLoopback("128.0.0.1")).toBe(false);
  });

  it("refuses plaintext beside tls, requireClientCert without a CA, and half a client certificate for pods", () => {
    expect(issues(`gateway: { host: 0.0.0.0, plaintext: true, ${TLS} }\n${POOLS}`)).toEqual(["gateway.plaintext: true contradicts gateway.tls (drop one)"]);
    expect(issues(`gateway: { tls: { certFile: a, keyFile: b, requireClientCert: true } }\n${POOLS}`)).toEqual([
      "gateway.tls.clientCaFile: is required when requireClientCert is true (the CA client certificates must chain to)",
    ]);
    expect(issues(`gateway: { tls: { certFile: a } }\n${POOLS}`)).toEqual(["gateway.tls.keyFile: is required"]);
    expect(issues(`${POOLS}    tls: { caFile: ca.crt, certFile: c.crt }\n`)).toEqual([
      "pools[0].tls.keyFile: certFile and keyFile go together (a client certificate and its key)",
    ]);
  });

  it("checks the limits: ranges, and a request timeout that outlasts every hold", () => {
    expect(issues(`gateway: { limits: { requestHeadersTimeoutMs: 0 } }\n${POOLS}`)).toEqual(["gateway.limits.requestHeadersTimeoutMs: expected an integer 100..3600000 (ms)"]);
    expect(issues(`gateway: { limits: { maxHeapBytes: 1000 } }\n${POOLS}`)).toEqual(["gateway.limits.maxHeapBytes: expected an integer number of bytes >= 64 MiB"]);
    expect(issues(`gateway: { limits: { requestTimeoutMs: 20000 } }\n${POOLS}`)).toEqual([
      "gateway.limits.requestTimeoutMs: must be greater than the longest hold a profile allows (300000 ms), or a held request is cut with a 408",
    ]);
    expect(issues(`gateway: { limits: { streamIdleTimeoutMs: 60000 } }\n${POOLS}`)).toEqual([
      "gateway.limits.streamIdleTimeoutMs: must be greater than the longest hold a profile allows (300000 ms): a held request is silent, and would be cut with a 408",
    ]);
  });

  it("resolves certificate paths against the config file's folder", () => {
    const c = parseConfigFile(`gateway: { tls: { certFile: tls/c.crt, keyFile: tls/c.key, clientCaFile: /abs/ca.crt } }\n${POOLS}    tls: { caFile: pods/ca.crt }\n`, "/etc/gw/config.yaml");
    expect(c.gateway.tls).toMatchObject({ certFile: "/etc/gw/tls/c.crt", keyFile: "/etc/gw/tls/c.key", clientCaFile: "/abs/ca.crt" });
    expect(c.pools[0].tls).toEqual({ caFile: "/etc/gw/pods/ca.crt" });
  });
});

type Doc = any;
const render = (yaml: string, extra: Record<string, unknown> = {}): Doc =>
  parseYaml(renderEnvoyConfig({ ...envoyParamsFromGatewayConfig(parseConfigFile(yaml, "/etc/gw/config.yaml"), { wasmPath: "/w/filter.wasm" }), sdsDir: "/run/envoy", ...extra }));
const listenerOf = (d: Doc) => d.static_resources.listeners[0];
const hcmOf = (d: Doc) => listenerOf(d).filter_chains[0].filters[0].typed_config;

describe("rendering the edge", () => {
  it("terminates TLS 1.2+ with h2 first, the certificate and client CA from file-watched SDS", () => {
    const yaml = `gateway: { host: 0.0.0.0, tls: { certFile: /etc/tls/tls.crt, keyFile: /etc/tls/tls.key, clientCaFile: /etc/ca/ca.crt, requireClientCert: true } }\n${POOLS}`;
    const socket = listenerOf(render(yaml)).filter_chains[0].transport_socket;
    expect(socket.name).toBe("envoy.transport_sockets.tls");
    const ctx = socket.typed_config;
    expect(ctx.require_client_certificate).toBe(true);
    expect(ctx.common_tls_context.tls_params).toEqual({ tls_minimum_protocol_version: "TLSv1_2" });
    expect(ctx.common_tls_context.alpn_protocols).toEqual(["h2", "http/1.1"]);
    expect(ctx.common_tls_context.tls_certificate_sds_secret_configs).toEqual([{
      name: "llm_gateway_listener_certificate",
      sds_config: { path_config_source: { path: "/run/envoy/llm_gateway_listener_certificate.sds.json", watched_directory: { path: "/run/envoy" } }, resource_api_version: "V3" },
    }]);
    expect(ctx.common_tls_context.validation_context_sds_secret_config.sds_config.path_config_source.path).toBe("/run/envoy/llm_gateway_client_ca.sds.json");
    expect(hcmOf(render(yaml)).codec_type).toBe("AUTO");

    const [cert, ca] = listenerSdsFiles(parseConfigFile(yaml, "/c.yaml").gateway.tls!, "/run/envoy");
    expect(JSON.parse(cert.content).resources[0]).toEqual({
      "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
      name: "llm_gateway_listener_certificate",
      // The Secret volume's folder: its ..data swap is one rename there.
      tls_certificate: { certificate_chain: { filename: "/etc/tls/tls.crt" }, private_key: { filename: "/etc/tls/tls.key" }, watched_directory: { path: "/etc/tls" } },
    });
    expect(JSON.parse(ca.content).resources[0].validation_context).toEqual({ trusted_ca: { filename: "/etc/ca/ca.crt" }, watched_directory: { path: "/etc/ca" } });
  });

  it("asks for a client certificate only when clientCaFile is set, and needs sdsDir for TLS", () => {
    const optional = render(`gateway: { tls: { certFile: /t/c, keyFile: /t/k, clientCaFile: /t/ca } }\n${POOLS}`);
    expect(listenerOf(optional).filter_chains[0].transport_socket.typed_config.require_client_certificate).toBe(false);
    expect(listenerOf(render(POOLS)).filter_chains[0].transport_socket).toBeUndefined();
    expect(() => render(`gateway: { ${TLS} }\n${POOLS}`, { sdsDir: undefined })).toThrow(/sdsDir/);
  });

  it("sets the timeouts, stream cap, small connection reads with the buffer filter before ours, and the heap overload manager", () => {
    const d = render(`gateway: { limits: { requestHeadersTimeoutMs: 5000, maxHeapBytes: 134217728 } }\n${POOLS}`);
    const hcm = hcmOf(d);
    expect(hcm).toMatchObject({
      request_headers_timeout: "5s", request_timeout: "660s", stream_idle_timeout: "600s",
      common_http_protocol_options: { idle_timeout: "300s" }, http2_protocol_options: { max_concurrent_streams: 100 },
    });
    expect(listenerOf(d).per_connection_buffer_limit_bytes).toBe(64 * 1024);
    expect(hcm.http_filters.map((f: Doc) => f.name)).toEqual(["envoy.filters.http.buffer", "envoy.filters.http.wasm", "envoy.filters.http.router"]);
    const om = d.overload_manager;
    expect(om.resource_monitors[0].typed_config.max_heap_size_bytes).toBe(134217728);
    expect(om.resource_monitors[1].typed_config.max_active_downstream_connections).toBe(50_000);
    expect(om.actions.map((a: Doc) => a.name)).toEqual([
      "envoy.overload_actions.shrink_heap", "envoy.overload_actions.reduce_timeouts",
      "envoy.overload_actions.reset_high_memory_stream", "envoy.overload_actions.stop_accepting_requests",
    ]);
    expect(om.buffer_factory_config).toBeDefined();
    expect(om.loadshed_points.map((p: Doc) => p.name)).toContain("envoy.load_shed_points.http1_server_abort_dispatch");
  });

  it("gives a TLS pool's cluster an UpstreamTlsContext, in the complete bootstrap and over CDS alike", () => {
    const yaml = `${POOLS}    tls: { caFile: /pods/ca.crt, serverName: vllm.internal }\n  - name: plain\n    baseModel: qwen\n    endpoints: ["10.0.0.8:8000"]\n`;
    const want = {
      name: "envoy.transport_sockets.tls",
      typed_config: {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        sni: "vllm.internal",
        common_tls_context: {
          tls_params: { tls_minimum_protocol_version: "TLSv1_2" },
          validation_context: { trusted_ca: { filename: "/pods/ca.crt" }, match_typed_subject_alt_names: [{ san_type: "DNS", matcher: { exact: "vllm.internal" } }] },
        },
      },
    };
    const clusters = render(yaml).static_resources.clusters;
    expect(clusters.find((c: Doc) => c.name === "llm_gateway_pool_llama").transport_socket).toEqual(want);
    expect(clusters.find((c: Doc) => c.name === "llm_gateway_pool_plain").transport_socket).toBeUndefined();
    const cds = xdsResourcesFromGatewayConfig(parseConfigFile(yaml, "/c.yaml")).clusters;
    expect(cds.find((c) => c.name === "llm_gateway_pool_llama")!.transport_socket).toEqual(want);
    // The bootstrap rendered split keeps the listener's edge.
    const split = parseYaml(renderEnvoyXds({ ...envoyParamsFromGatewayConfig(parseConfigFile(yaml, "/c.yaml"), { wasmPath: "/w.wasm" }) }).bootstrap);
    expect(split.overload_manager.resource_monitors[0].name).toBe("envoy.resource_monitors.fixed_heap");
  });
});
