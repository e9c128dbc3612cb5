import { generateKeyPairSync } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { BUFFER_SLACK_BYTES, findEnvoy, gatewayTemplatePath, renderEnvoyConfig, renderEnvoyXds, xdsResourcesFromGatewayConfig, CLAIM_HEADERS, envoyParamsFromGatewayConfig, MODEL_NAME_HEADER, POOL_HEADER, STREAM_HEADER, type EnvoyConfigParams, type ModelRouteParams } from "../../host/envoy/index.js";
import { allocateBaseId, startEnvoy, validateEnvoyConfig, type EnvoyProcess } from "../../testing/launcher/envoy-process.js";
import { encodeResource } from "../../host/aggregator/xds-codec.js";
import { CONTRACT } from "../../host/contract.js";
import { CLUSTER_TYPE, ROUTE_CONFIGURATION_TYPE } from "../../host/aggregator/xds.js";
import { BUILTIN_PROFILES, loadGatewayConfig, parseGatewayConfig } from "../../host/config.js";
import { filterWasmPath, projectRoot } from "../../host/paths.js";
import { jwtSchema } from "../../host/config/jwt.js";
import { makeLoopbackCert } from "../helpers/jwks-server.js";

const params: EnvoyConfigParams = {
  gatewayHost: "127.0.0.1",
  gatewayPort: 8080,
  adminPort: 0,
  aggregatorHost: "127.0.0.1",
  aggregatorPort: 50051,
  wasmPath: "/opt/some dir/filter.wasm",
  maxBodyBytes: 4 * 1024 * 1024,
  pools: ["llama", "org/qwen:32b"],
};

// The rendered bootstrap is walked loosely in assertions.
type Doc = any;

const hcmOf = (doc: Doc) => doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
const routesOf = (doc: Doc): Doc[] => hcmOf(doc).route_config.virtual_hosts[0].routes;
const INFERENCE = "^/v1/(chat/completions|completions|responses|embeddings)$";
/** Whether a route is a stream twin (it matches the filter's x-gateway-stream). */
const streamed = (r: Doc) => r.match.headers?.some((h: Doc) => h.name === STREAM_HEADER) ?? false;
const STRIPPED = [{ remove_on_match: { key_matcher: { prefix: "x-gateway-" } } }, { remove_on_match: { key_matcher: { prefix: "x-envoy-" } } }];

describe("renderEnvoyConfig", () => {
  const doc: Doc = parseYaml(renderEnvoyConfig(params));
  const hcm = hcmOf(doc);
  const wasmFilterConfig = () => hcm.http_filters.find((f: Doc) => f.name === "envoy.filters.http.wasm").typed_config.config;

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

  it("builds the listener: no reuse_port, buffer limit with slack, normalised paths, 400s keep HTTP/1.1 open, x-gateway-* and x-envoy-* stripped before routing", () => {
    const [listener] = doc.static_resources.listeners;
    expect(listener.address.socket_address).toEqual({ address: "127.0.0.1", port_value: 8080 });
    expect(listener.enable_reuse_port).toBe(false);
    // Small reads per connection (gateway.limits); the buffer filter holds a whole body.
    expect(listener.per_connection_buffer_limit_bytes).toBe(64 * 1024);
    expect(BUFFER_SLACK_BYTES).toBe(64 * 1024);
    expect(hcm.stat_prefix).toBe("llm_gateway");
    expect(hcm.codec_type).toBe("AUTO");
    expect(hcm.stream_idle_timeout).toMatch(/^\d+s$/);
    expect(hcm).toMatchObject({ normalize_path: true, merge_slashes: true, path_with_escaped_slashes_action: "UNESCAPE_AND_REDIRECT" });
    expect(hcm.http_protocol_options).toEqual({ override_stream_error_on_invalid_http_message: true });
    expect(hcm.early_header_mutation_extensions).toEqual([{
      name: "envoy.http.early_header_mutation.header_mutation",
      typed_config: {
        "@type": "type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation",
        mutations: STRIPPED,
      },
    }]);
    expect(hcm.http_filters.map((f: Doc) => f.name)).toEqual([
      "envoy.filters.http.buffer",
      "envoy.filters.http.wasm",
      "envoy.filters.http.router",
    ]);
    expect(hcm.http_filters[0].typed_config.max_request_bytes).toBe(params.maxBodyBytes + BUFFER_SLACK_BYTES);
  });

  it("routes each pool's inference POSTs by x-gateway-pool, fails closed without it, and answers the rest itself", () => {
    const routes: Doc[] = hcm.route_config.virtual_hosts[0].routes;
    const poolRoute = (pool: string) => ({
      match: {
        safe_regex: { regex: INFERENCE },
        headers: [
          { name: ":method", string_match: { exact: "POST" } },
          { name: "x-gateway-pool", string_match: { exact: pool } },
        ],
      },
      route: {
        cluster: `llm_gateway_pool_${pool}`,
        timeout: "0s",
        retry_policy: {
          retry_on: "connect-failure,refused-stream,reset,retriable-status-codes",
          retriable_status_codes: [500, 502, 504],
          num_retries: 2,
          retry_host_predicate: [{
            name: "envoy.retry_host_predicates.previous_hosts",
            typed_config: { "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate" },
          }],
          host_selection_retry_max_attempts: 3,
        },
      },
    });
    // Each pool route has its stream twin right before it: x-gateway-stream
    // matched too, and the pool's profile's streamIdleMs as per-try idle timeout.
    const streamRoute = (pool: string, idle: string) => {
      const r = poolRoute(pool);
      return {
        match: { ...r.match, headers: [...r.match.headers, { name: STREAM_HEADER, string_match: { exact: "1" } }] },
        route: { ...r.route, retry_policy: { ...r.route.retry_policy, per_try_idle_timeout: idle } },
      };
    };
    const latencyIdle = `${BUILTIN_PROFILES.latency.deadlines.streamIdleMs / 1000}s`;
    expect(routes.slice(0, 4)).toEqual([streamRoute("llama", latencyIdle), poolRoute("llama"), streamRoute("org/qwen:32b", latencyIdle), poolRoute("org/qwen:32b")]);
    expect(routesOf(parseYaml(renderEnvoyConfig({ ...params, streamIdleMs: { llama: 1500, "org/qwen:32b": 300_000 } }))).slice(0, 4)).toEqual([
      streamRoute("llama", "1.5s"), poolRoute("llama"), streamRoute("org/qwen:32b", "300s"), poolRoute("org/qwen:32b"),
    ]);
    const rest = routes.slice(4).map((r) => ({
      regex: r.match.safe_regex?.regex ?? r.match.prefix ?? (r.match.connect_matcher ? "CONNECT" : undefined),
      method: r.match.headers?.[0].string_match.exact,
      status: r.direct_response.status,
      allow: r.response_headers_to_add?.[0].header.value,
    }));
    const MODELS = "^/v1/models(/.+)?$|^/health$";
    expect(rest).toEqual([
      { regex: INFERENCE, method: "POST", status: 503, allow: undefined },
      { regex: INFERENCE, method: undefined, status: 405, allow: "POST" },
      { regex: MODELS, method: "GET", status: 503, allow: undefined },
      { regex: MODELS, method: undefined, status: 405, allow: "GET" },
      { regex: "/", method: undefined, status: 404, allow: undefined },
      { regex: "CONNECT", method: undefined, status: 405, allow: undefined },
    ]);
    // The patterns (RE2; these use nothing RE2 and JavaScript disagree on).
    const inference = new RegExp(INFERENCE);
    for (const p of ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]) expect(inference.test(p)).toBe(true);
    for (const p of ["/v1/chat/completions/x", "/v1/chat", "/v1/load_lora_adapter", "/chat/completions"]) expect(inference.test(p)).toBe(false);
    const models = new RegExp(MODELS);
    for (const p of ["/v1/models", "/v1/models/llama-3.1-8b", "/v1/models/org/model", "/health"]) expect(models.test(p)).toBe(true);
    for (const p of ["/v1/models/", "/v1/modelsx", "/health/x", "/metrics"]) expect(models.test(p)).toBe(false);
  });

  it("configures the HTTP filter on the same VM as the singleton, reloading a crashed VM", () => {
    const cfg = wasmFilterConfig();
    const singleton = doc.bootstrap_extensions[0].typed_config.config;
    expect(cfg.root_id).toBe("llm_gateway");
    expect(cfg.vm_config).toEqual(singleton.vm_config);
    expect(cfg.allow_on_headers_stop_iteration).toBe(true);
    expect(cfg.failure_policy).toBe("FAIL_RELOAD");
    expect(cfg).not.toHaveProperty("fail_open");
    expect(JSON.parse(cfg.configuration.value)).toEqual({ max_body_bytes: params.maxBodyBytes });
  });

  it("passes the gateway config's view-age and passive-health settings to the filter", () => {
    const withSettings = parseYaml(renderEnvoyConfig({
      ...params,
      staleView: { maxAgeMs: 2500, policy: "reject", retryAfterS: 2 },
      passiveHealth: { ejectAfterFailures: 4, ejectMs: 7000, saturatedBackoffMs: 500 },
    }));
    const filters = withSettings.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters;
    const wasm = filters.find((f: { name: string }) => f.name === "envoy.filters.http.wasm").typed_config.config;
    expect(JSON.parse(wasm.configuration.value)).toEqual({
      max_body_bytes: params.maxBodyBytes, max_view_age_ms: 2500, stale_view_policy: "reject", retry_after_s: 2,
      eject_after_failures: 4, eject_ms: 7000, saturated_backoff_ms: 500,
    });
  });

  it("makes each pool an EDS cluster fed over ADS, with override_host over least-request and outlier detection", () => {
    expect(doc.node).toEqual({ id: "llm-gateway", cluster: "llm-gateway" });
    expect(doc.dynamic_resources.ads_config).toMatchObject({
      api_type: "GRPC",
      transport_api_version: "V3",
      grpc_services: [{
        envoy_grpc: {
          cluster_name: "llm_gateway_aggregator",
          retry_policy: { retry_back_off: { base_interval: "0.5s", max_interval: "5s" } },
        },
      }],
    });
    const clusters: Doc[] = doc.static_resources.clusters;
    expect(clusters.map((c) => c.name)).toEqual(["llm_gateway_pool_llama", "llm_gateway_pool_org/qwen:32b", "llm_gateway_aggregator"]);
    for (const pool of clusters.slice(0, 2)) {
      expect(pool.type).toBe("EDS");
      expect(pool.eds_cluster_config.eds_config).toEqual({ ads: {}, resource_api_version: "V3", initial_fetch_timeout: "5s" });
      expect(pool).not.toHaveProperty("load_assignment");
      // No panic routing: the fallback never picks a pod the aggregator marked UNHEALTHY.
      expect(pool.common_lb_config).toEqual({ update_merge_window: "0s", healthy_panic_threshold: { value: 0 } });
      const [lb] = pool.load_balancing_policy.policies;
      expect(lb.typed_extension_config.name).toBe("envoy.load_balancing_policies.override_host");
      const override = lb.typed_extension_config.typed_config;
      expect(override["@type"]).toBe("type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost");
      expect(override.override_host_sources).toEqual([{ header: "x-gateway-destination-endpoint" }]);
      expect(override.fallback_policy.policies[0].typed_extension_config.name).toBe("envoy.load_balancing_policies.least_request");
      expect(pool.outlier_detection).toEqual({
        split_external_local_origin_errors: true,
        consecutive_local_origin_failure: 2,
        consecutive_5xx: 3,
        interval: "1s",
        base_ejection_time: "10s",
        max_ejection_percent: 50,
      });
      expect(pool.circuit_breakers.thresholds[0]).toMatchObject({
        max_connections: 100000,
        max_pending_requests: 100000,
        max_requests: 100000,
        max_retries: 100000,
      });
    }

    const agg = clusters.find((c) => c.name === "llm_gateway_aggregator");
    expect(agg.type).toBe("STRICT_DNS");
    const opts = agg.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
    expect(opts.explicit_http_config).toHaveProperty("http2_protocol_options");
    expect(agg.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address).toEqual({
      address: "127.0.0.1",
      port_value: 50051,
    });
  });

  it("turns every local reply into an OpenAI error except the filter's own, which it leaves untouched", () => {
    const mappers: Doc[] = hcm.local_reply_config.mappers;
    expect(mappers[0]).toEqual({ filter: { header_filter: { header: { name: "x-gateway-reply", present_match: true } } } });
    expect(hcm.local_reply_config).not.toHaveProperty("body_format");
    // What each status (or upstream response flag) becomes; the first matching mapper wins.
    const pick = (status: number, flags: string[] = []) =>
      mappers.slice(1).find((m) => {
        const f = m.filter;
        if (f.response_flag_filter) return f.response_flag_filter.flags.some((x: string) => flags.includes(x));
        const { op, value } = f.status_code_filter.comparison;
        return op === "EQ" ? status === value.default_value : status >= value.default_value;
      })?.body_format_override.json_format.error;
    const expected: Array<[number, string[], string, string]> = [
      [400, [], "invalid_request_error", "bad_request"],
      [401, [], "authentication_error", "invalid_token"],
      [403, [], "permission_error", "forbidden"],
      [404, [], "invalid_request_error", "unknown_url"],
      [405, [], "invalid_request_error", "method_not_allowed"],
      [408, [], "invalid_request_error", "request_timeout"],
      [413, [], "invalid_request_error", "request_too_large"],
      [426, [], "invalid_request_error", "upgrade_required"],
      [429, [], "rate_limit_error", "rate_limit_exceeded"],
      [431, [], "invalid_request_error", "request_headers_too_large"],
      [418, [], "invalid_request_error", "invalid_request"],
      [500, [], "server_error", "internal_error"],
      [502, [], "server_error", "internal_error"],
      [503, [], "server_error", "service_unavailable"],
      [504, ["UT"], "upstream_error", "upstream_timeout"],
      [503, ["UH"], "upstream_error", "no_endpoint"],
      [503, ["UF", "URX"], "upstream_error", "upstream_unavailable"],
      [503, ["UO"], "upstream_error", "upstream_unavailable"],
    ];
    for (const [status, flags, type, code] of expected) {
      const error = pick(status, flags);
      expect(error, `${status} ${flags}`).toMatchObject({ type, code, param: null });
      expect(Object.keys(error).sort()).toEqual(["code", "message", "param", "type"]);
      expect(error.message).toMatch(/\S/);
    }
    expect(pick(307)).toBeUndefined(); // a redirect keeps its empty body
    // No route table at all (routes over RDS not there yet): 503, ahead of the 404 mapper.
    expect(mappers[1]).toMatchObject({ filter: { response_flag_filter: { flags: ["NR"] } }, status_code: 503 });
    expect(mappers[1].body_format_override.json_format.error).toMatchObject({ type: "server_error", code: "service_unavailable", param: null });
  });

  it("leaves the Wasm filter out on request, and nothing else", () => {
    const without = hcmOf(parseYaml(renderEnvoyConfig({ ...params, wasmFilter: false })));
    expect(without.http_filters.map((f: Doc) => f.name)).toEqual(["envoy.filters.http.buffer", "envoy.filters.http.router"]);
    const { http_filters: _a, ...restWithout } = without;
    const { http_filters: _b, ...restWith } = hcm;
    expect(restWithout).toEqual(restWith);
  });

  it("puts jwt_authn before the buffer and Wasm filters", () => {
    const jwt = jwtSchema.parse({ issuer: "https://issuer.test", jwksFile: "/etc/jwks.json" });
    const names = hcmOf(parseYaml(renderEnvoyConfig({ ...params, jwt }))).http_filters.map((f: Doc) => f.name);
    expect(names).toEqual(["envoy.filters.http.jwt_authn", "envoy.filters.http.buffer", "envoy.filters.http.wasm", "envoy.filters.http.router"]);
  });

  it("renders jwt_authn with /health alone open, exp required, the skew, and tokens from the Bearer header only", () => {
    const authnOf = (jwt: Doc) => hcmOf(parseYaml(renderEnvoyConfig({ ...params, jwt: jwtSchema.parse(jwt) }))).http_filters[0].typed_config;
    const authn = authnOf({ issuer: "https://issuer.test", jwksFile: "/etc/jwks.json" });
    expect(authn.rules).toEqual([{ match: { path: "/health" } }, { match: { prefix: "/" }, requires: { provider_name: "gateway" } }]);
    expect(authn.providers.gateway).toMatchObject({
      require_expiration: true,
      clock_skew_seconds: 60,
      from_headers: [{ name: "authorization", value_prefix: "Bearer " }],
      local_jwks: { filename: "/etc/jwks.json" },
    });
    expect(authn.providers.gateway).not.toHaveProperty("from_params");
    const loose = authnOf({ issuer: "https://issuer.test", jwksFile: "/etc/jwks.json", requireExpiration: false, clockSkewSeconds: 5, allowQueryToken: true });
    expect(loose.providers.gateway).toMatchObject({ require_expiration: false, clock_skew_seconds: 5, from_params: ["access_token"] });
  });

  it("fetches a remote JWKS through a TLS cluster that checks the host's certificate", () => {
    const jwt = jwtSchema.parse({ issuer: "https://issuer.test", jwksUri: "https://idp.example.test:8443/keys", jwksCaFile: "/etc/ca.pem", jwksCacheDurationS: 60 });
    const d: Doc = parseYaml(renderEnvoyXds({ ...params, jwt }).bootstrap);
    const provider = hcmOf(d).http_filters[0].typed_config.providers.gateway;
    expect(provider.remote_jwks).toMatchObject({
      http_uri: { uri: "https://idp.example.test:8443/keys", cluster: "llm_gateway_jwks" },
      cache_duration: "60s",
      async_fetch: { fast_listener: false },
    });
    const cluster = d.static_resources.clusters.find((c: Doc) => c.name === "llm_gateway_jwks");
    expect(cluster.type).toBe("STRICT_DNS");
    expect(cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address).toEqual({ address: "idp.example.test", port_value: 8443 });
    expect(cluster.transport_socket.typed_config).toMatchObject({
      sni: "idp.example.test",
      common_tls_context: {
        validation_context: {
          trusted_ca: { filename: "/etc/ca.pem" },
          match_typed_subject_alt_names: [{ san_type: "DNS", matcher: { exact: "idp.example.test" } }],
        },
      },
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
    expect(() => renderEnvoyConfig({ ...params, maxBodyBytes: CONTRACT.limits.maxBodyBytes + 1 })).toThrow(/maxBodyBytes/);
    expect(() => renderEnvoyConfig({ ...params, gatewayHost: "a b" })).toThrow(/gatewayHost/);
    expect(() => renderEnvoyConfig({ ...params, pools: ["a b"] })).toThrow(/pool name "a b"/);
    expect(() => renderEnvoyConfig({ ...params, pools: ['x"}'] })).toThrow(/pool name/);
    expect(() => renderEnvoyConfig({ ...params, pools: ["a", "a"] })).toThrow(/appears twice/);
  });

  it("fails on a placeholder it has no value for", () => {
    expect(() => renderEnvoyConfig(params, "a: ${ADMIN_PORT}\nb: ${NOPE}\nc: ${NOPE}\n")).toThrow(
      /unreplaced placeholders.*\$\{NOPE\}$/,
    );
    // The pool placeholder only means something in a route or a cluster.
    const template = readFileSync(gatewayTemplatePath(), "utf8").replace("stat_prefix: llm_gateway", 'stat_prefix: "${POOL}"');
    expect(() => renderEnvoyConfig(params, template)).toThrow(/unreplaced placeholders.*\$\{POOL\}$/);
  });
});

describe("renderEnvoyConfig: model-name routes and traffic gates", () => {
  const modelRoutes: ModelRouteParams[] = [
    { model: "sql-lora", pools: ["llama"], timeoutMs: 1500 },
    { model: "chat", pools: ["llama", "org/qwen:32b"], timeoutMs: 30_000 },
    { model: "batch.v2", pools: ["org/qwen:32b"], rateLimit: { requestsPerS: 5, burst: 10 } },
  ];
  const jwt = jwtSchema.parse({ issuer: "https://issuer.test", jwksFile: "/etc/jwks.json" });
  const render = (p: Partial<EnvoyConfigParams>) => hcmOf(parseYaml(renderEnvoyConfig({ ...params, ...p })));
  const hcm = render({ modelRoutes });
  const routes: Doc[] = hcm.route_config.virtual_hosts[0].routes;
  const filterSettings = (h: Doc) => JSON.parse(h.http_filters.find((f: Doc) => f.name === "envoy.filters.http.wasm").typed_config.config.configuration.value);
  const poolHeader = (r: Doc) => r.match.headers?.find((h: Doc) => h.name === POOL_HEADER)?.string_match.exact;
  const modelHeader = (r: Doc) => r.match.headers?.find((h: Doc) => h.name === MODEL_NAME_HEADER)?.string_match.exact;

  it("puts each model's routes right before its pools' routes, a model that lands in two pools on both, each with its stream twin first", () => {
    expect(routes.slice(0, 12).map((r) => [poolHeader(r), modelHeader(r) ?? null, streamed(r)])).toEqual([
      ["llama", "sql-lora", true],
      ["llama", "sql-lora", false],
      ["llama", "chat", true],
      ["llama", "chat", false],
      ["llama", null, true],
      ["llama", null, false],
      ["org/qwen:32b", "chat", true],
      ["org/qwen:32b", "chat", false],
      // Rate-limited: no twin, which would have a token bucket of its own.
      ["org/qwen:32b", "batch.v2", false],
      ["org/qwen:32b", null, true],
      ["org/qwen:32b", null, false],
      [undefined, null, false], // the fail-closed 503
    ]);
  });

  it("gives a model's stream routes its own profile's streamIdleMs, else each pool's", () => {
    const idle = (rs: Doc[], pool: string, model: string | null) =>
      rs.find((r) => streamed(r) && poolHeader(r) === pool && (modelHeader(r) ?? null) === model)?.route.retry_policy.per_try_idle_timeout;
    const rs = render({ modelRoutes: [{ ...modelRoutes[1], streamIdleMs: 90_000 }, modelRoutes[0]], streamIdleMs: { llama: 10_000, "org/qwen:32b": 20_000 } }).route_config.virtual_hosts[0].routes;
    expect([idle(rs, "llama", "chat"), idle(rs, "org/qwen:32b", "chat"), idle(rs, "llama", "sql-lora"), idle(rs, "llama", null), idle(rs, "org/qwen:32b", null)]).toEqual(["90s", "90s", "10s", "10s", "20s"]);
    for (const r of rs.filter((x: Doc) => !streamed(x) && x.route)) expect(r.route.retry_policy).not.toHaveProperty("per_try_idle_timeout");
    const chatStream = rs.find((r: Doc) => streamed(r) && modelHeader(r) === "chat");
    expect(chatStream.name).toBe("model chat on llama, streamed");
    expect(chatStream.route.timeout).toBe("30s"); // the model's whole-response timeout holds for its streams too
    expect(() => render({ streamIdleMs: { llama: 0 } })).toThrow(/streamIdleMs of pool llama/);
  });

  it("matches like the pool's route plus x-gateway-model-name, with its cluster and retries and the model's timeout", () => {
    const base = routesOf(parseYaml(renderEnvoyConfig(params))).filter((r) => !streamed(r));
    const [sql, chatLlama, , chatQwen, batch] = routes.filter((r) => !streamed(r));
    expect(sql).toEqual({
      name: "model sql-lora on llama",
      match: { ...base[0].match, headers: [...base[0].match.headers, { name: MODEL_NAME_HEADER, string_match: { exact: "sql-lora" } }] },
      route: { ...base[0].route, timeout: "1.5s" },
    });
    expect(chatLlama.route).toEqual({ ...base[0].route, timeout: "30s" });
    expect(chatQwen.route).toEqual({ ...base[1].route, timeout: "30s" });
    expect(batch.route).toEqual(base[1].route); // no timeout given: the pool's (none)
    expect(routes.filter((r) => !modelHeader(r) && !streamed(r))).toEqual(base);
  });

  it("rate-limits a model with Envoy's local_ratelimit, configured on its route only, with retry-after", () => {
    expect(hcm.http_filters.map((f: Doc) => f.name)).toEqual([
      "envoy.filters.http.buffer",
      "envoy.filters.http.wasm",
      "envoy.filters.http.local_ratelimit",
      "envoy.filters.http.router",
    ]);
    const TYPE = "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit";
    // No bucket and no filter_enabled (0% by default): it limits nothing by itself.
    expect(hcm.http_filters[2].typed_config).toEqual({ "@type": TYPE, stat_prefix: "llm_gateway_model_rate_limit" });
    const all = (key: string) => ({ runtime_key: key, default_value: { numerator: 100, denominator: "HUNDRED" } });
    expect(routes.find((r) => modelHeader(r) === "batch.v2").typed_per_filter_config).toEqual({
      "envoy.filters.http.local_ratelimit": {
        "@type": TYPE,
        stat_prefix: "llm_gateway_model_batch_v2",
        token_bucket: { max_tokens: 10, tokens_per_fill: 5, fill_interval: "1s" },
        filter_enabled: all("llm_gateway.model_rate_limit.enabled"),
        filter_enforced: all("llm_gateway.model_rate_limit.enforced"),
        response_headers_to_add: [{ header: { key: "retry-after", value: "1" }, append_action: "OVERWRITE_IF_EXISTS_OR_ADD" }],
      },
    });
    for (const r of routes.filter((x) => modelHeader(x) !== "batch.v2" && !x.match.connect_matcher)) expect(r).not.toHaveProperty("typed_per_filter_config");
    // Without a rate-limited model, no rate-limit filter at all.
    expect(render({ modelRoutes: modelRoutes.slice(0, 2) }).http_filters.map((f: Doc) => f.name)).not.toContain("envoy.filters.http.local_ratelimit");
  });

  it("takes the routes from the gateway config's models, on the pools their requests land in", () => {
    const cfg = parseGatewayConfig(`
pools:
  - { name: llama, baseModel: llama-3.1-8b, adapters: [sql-lora], endpoints: ["127.0.0.1:1"] }
  - { name: qwen, baseModel: qwen3-32b, profile: throughput, endpoints: ["127.0.0.1:2"] }
profiles:
  throughput: { deadlines: { streamIdleMs: 120000 } }
models:
  - { name: sql-lora, route: { rateLimit: { requestsPerS: 2 } } }
  - { name: qwen3-32b, priority: sheddable }
  - { name: chat, split: [{ model: qwen3-32b, weight: 1 }, { model: sql-lora, weight: 1 }, { model: llama-3.1-8b, weight: 1 }], route: { timeoutMs: 500 } }
  - { name: llama-3.1-8b, split: [{ model: sql-lora, weight: 1 }], route: { timeoutMs: 100 }, profile: throughput }
`);
    const p = envoyParamsFromGatewayConfig(cfg, { wasmPath: "/x/filter.wasm" });
    expect(p.modelRoutes).toEqual([
      { model: "sql-lora", pools: ["llama"], rateLimit: { requestsPerS: 2, burst: 2 } },
      { model: "chat", pools: ["qwen", "llama"], timeoutMs: 500 },
      { model: "llama-3.1-8b", pools: ["llama"], timeoutMs: 100, streamIdleMs: 120_000 },
    ]);
    // Each pool's stream routes take its profile's streamIdleMs.
    expect(p.streamIdleMs).toEqual({ llama: BUILTIN_PROFILES.latency.deadlines.streamIdleMs, qwen: 120_000 });
    // A model with a profile of its own but no route still gets routes: its streams take its profile's streamIdleMs.
    const own = parseGatewayConfig(`
pools: [{ name: llama, baseModel: llama-3.1-8b, adapters: [sql-lora], endpoints: ["127.0.0.1:1"] }]
models: [{ name: sql-lora, profile: throughput }]
`);
    expect(envoyParamsFromGatewayConfig(own, { wasmPath: "/x/filter.wasm" }).modelRoutes).toEqual([
      { model: "sql-lora", pools: ["llama"], streamIdleMs: BUILTIN_PROFILES.throughput.deadlines.streamIdleMs },
    ]);
    expect(p.traffic).toEqual({
      critical: "none", debug: "off", tenant: "none", queue: { maxBytesPerWorker: 64 * 1024 * 1024, maxRequestsPerWorker: 4096 },
    });
  });

  it("copies a gate's claim into x-gateway-claim-* with jwt_authn, which runs after early_header_mutation stripped the client's copies", () => {
    const gated = render({ jwt, traffic: { critical: { claim: "tier", values: ["gold", "platinum"] }, debug: { claim: "org.role", values: ["sre"] } } });
    expect(gated.early_header_mutation_extensions[0].typed_config.mutations).toEqual(STRIPPED);
    expect(CLAIM_HEADERS).toEqual({ critical: "x-gateway-claim-critical", debug: "x-gateway-claim-debug", tenant: "x-gateway-claim-tenant" });
    const [authn] = gated.http_filters;
    expect(authn.name).toBe("envoy.filters.http.jwt_authn");
    expect(authn.typed_config.providers.gateway.claim_to_headers).toEqual([
      { header_name: "x-gateway-claim-critical", claim_name: "tier" },
      { header_name: "x-gateway-claim-debug", claim_name: "org.role" },
    ]);
    expect(filterSettings(gated)).toEqual({
      max_body_bytes: params.maxBodyBytes,
      critical_from: "claim",
      critical_claim_values: "gold,platinum",
      debug: "claim",
      debug_claim_values: "sre",
    });
    // A tenant from a claim: copied the same way, and the filter told to read it.
    const tenants = render({ jwt, traffic: { critical: "none", debug: "off", tenant: { claim: "sub" } } });
    expect(tenants.http_filters[0].typed_config.providers.gateway.claim_to_headers).toEqual([
      { header_name: "x-gateway-claim-tenant", claim_name: "sub" },
    ]);
    expect(filterSettings(tenants)).toEqual({ max_body_bytes: params.maxBodyBytes, tenant_from: "claim" });
    // Without claim gates, jwt_authn copies nothing.
    expect(render({ jwt, traffic: { critical: "any", debug: "all" } }).http_filters[0].typed_config.providers.gateway).not.toHaveProperty("claim_to_headers");
  });

  it("tells the filter about the gates only when they differ from its defaults (none, off)", () => {
    expect(filterSettings(render({ traffic: { critical: "none", debug: "off" } }))).toEqual({ max_body_bytes: params.maxBodyBytes });
    expect(filterSettings(render({ traffic: { critical: "any", debug: "off" } }))).toEqual({ max_body_bytes: params.maxBodyBytes, critical_from: "any" });
    expect(filterSettings(render({ traffic: { critical: "none", debug: "all" } }))).toEqual({ max_body_bytes: params.maxBodyBytes, debug: "all" });
    expect(filterSettings(render({ traffic: { critical: "none", debug: "off", tenant: "header" } }))).toEqual({ max_body_bytes: params.maxBodyBytes, tenant_from: "header" });
    const queue = { maxBytesPerWorker: 1_000_000, maxRequestsPerWorker: 4096 };
    expect(filterSettings(render({ traffic: { critical: "none", debug: "off", queue } }))).toEqual({ max_body_bytes: params.maxBodyBytes, max_queued_bytes: 1_000_000 });
  });

  it("rejects bad model routes and a claim gate without jwt", () => {
    expect(() => renderEnvoyConfig({ ...params, traffic: { critical: { claim: "tier", values: ["gold"] }, debug: "off" } })).toThrow(/need jwt/);
    expect(() => renderEnvoyConfig({ ...params, jwt, traffic: { critical: { claim: "tier", values: ["a,b"] }, debug: "off" } })).toThrow(/commas/);
    expect(() => renderEnvoyConfig({ ...params, modelRoutes: [{ model: "m", pools: ["nope"] }] })).toThrow(/unknown pool nope/);
    expect(() => renderEnvoyConfig({ ...params, modelRoutes: [{ model: 'x"}', pools: ["llama"] }] })).toThrow(/model name/);
    expect(() => renderEnvoyConfig({ ...params, modelRoutes: [{ model: "m", pools: ["llama"] }, { model: "m", pools: ["llama"] }] })).toThrow(/two routes/);
    expect(() => renderEnvoyConfig({ ...params, modelRoutes: [{ model: "m", pools: ["llama", "org/qwen:32b"], rateLimit: { requestsPerS: 1, burst: 1 } }] })).toThrow(/single pool/);
    expect(() => renderEnvoyConfig({ ...params, modelRoutes: [{ model: "m", pools: ["llama"], rateLimit: { requestsPerS: 4, burst: 2 } }] })).toThrow(/burst/);
    expect(() => renderEnvoyConfig({ ...params, modelRoutes: [{ model: "m", pools: ["llama"], timeoutMs: 0 }] })).toThrow(/timeoutMs/);
  });
});

describe("renderEnvoyXds: the same rendering split for the aggregator as control plane", () => {
  const modelRoutes: ModelRouteParams[] = [{ model: "batch", pools: ["org/qwen:32b"], rateLimit: { requestsPerS: 5, burst: 10 } }];
  const complete: Doc = parseYaml(renderEnvoyConfig({ ...params, modelRoutes }));
  const split = renderEnvoyXds({ ...params, modelRoutes });
  const bootstrap: Doc = parseYaml(split.bootstrap);
  const OVER_ADS = { ads: {}, resource_api_version: "V3", initial_fetch_timeout: "3s" };

  it("moves the pools' clusters to CDS and the route table to RDS, and changes nothing else", () => {
    const poolClusters = complete.static_resources.clusters.filter((c: Doc) => c.name.startsWith("llm_gateway_pool_"));
    expect(split.resources.clusters).toEqual(poolClusters);
    expect(split.resources.routeConfigs).toEqual([hcmOf(complete).route_config]);

    const expected = structuredClone(complete);
    const hcm = hcmOf(expected);
    delete hcm.route_config;
    hcm.rds = { route_config_name: "llm_gateway", config_source: OVER_ADS };
    expected.static_resources.clusters = expected.static_resources.clusters.filter((c: Doc) => !c.name.startsWith("llm_gateway_pool_"));
    expected.dynamic_resources.cds_config = OVER_ADS;
    expect(bootstrap).toEqual(expected);
    expect(bootstrap.static_resources.clusters.map((c: Doc) => c.name)).toEqual(["llm_gateway_aggregator"]);
  });

  it("always has the local rate limit filter, so a reload can give a model a rate limit", () => {
    const names = hcmOf(parseYaml(renderEnvoyXds(params).bootstrap)).http_filters.map((f: Doc) => f.name);
    expect(names).toEqual(["envoy.filters.http.buffer", "envoy.filters.http.wasm", "envoy.filters.http.local_ratelimit", "envoy.filters.http.router"]);
    expect(hcmOf(bootstrap).http_filters.map((f: Doc) => f.name)).toEqual(names);
  });

  it("keeps pools and models out of the bootstrap, and everything else out of the resources", () => {
    expect(renderEnvoyXds({ ...params, pools: ["other"], modelRoutes: [] }).bootstrap).toBe(split.bootstrap);
    const cfg = parseGatewayConfig(`
gateway: { port: 0, adminPort: 0, maxBodyBytes: 1000, staleView: { policy: reject } }
pools:
  - { name: llama, baseModel: llama-3.1-8b, adapters: [sql-lora], endpoints: ["127.0.0.1:1"] }
models:
  - { name: sql-lora, route: { rateLimit: { requestsPerS: 2 } } }
`);
    const resources = xdsResourcesFromGatewayConfig(cfg);
    expect(resources).toEqual(renderEnvoyXds(envoyParamsFromGatewayConfig(cfg, { wasmPath: "/x/filter.wasm" })).resources);
    expect(xdsResourcesFromGatewayConfig({ ...cfg, gateway: { ...cfg.gateway, port: 9000, maxBodyBytes: 5 } })).toEqual(resources);
    expect(resources.clusters.map((c) => c.name)).toEqual(["llm_gateway_pool_llama"]);
    expect(JSON.stringify(resources.routeConfigs)).toContain("llm_gateway_model_sql-lora");
  });

  it("encodes every resource with Envoy's API", () => {
    for (const c of split.resources.clusters) expect(encodeResource(CLUSTER_TYPE, c).value.length).toBeGreaterThan(100);
    for (const r of split.resources.routeConfigs) expect(encodeResource(ROUTE_CONFIGURATION_TYPE, r).value.length).toBeGreaterThan(100);
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

  it("accepts the split bootstrap with the built filter", async () => {
    await validateEnvoyConfig(renderEnvoyXds({ ...params, wasmPath: filterWasmPath }).bootstrap);
  }, 30_000);

  it("accepts it without the filter and with jwt_authn", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gw-jwks-"));
    try {
      const jwksFile = join(dir, "jwks.json");
      const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
      writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...publicKey.export({ format: "jwk" }), kid: "k", alg: "ES256" }] }));
      const jwt = jwtSchema.parse({ issuer: "https://issuer.test", audiences: ["gw"], jwksFile });
      await validateEnvoyConfig(renderEnvoyConfig({ ...params, wasmPath: filterWasmPath, wasmFilter: false, jwt }));
      const remote = jwtSchema.parse({ issuer: "https://issuer.test", jwksUri: "https://127.0.0.1:8443/jwks.json", jwksCaFile: makeLoopbackCert(dir).caFile });
      await validateEnvoyConfig(renderEnvoyXds({ ...params, wasmPath: filterWasmPath, wasmFilter: false, jwt: remote }).bootstrap);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);

  it("accepts the JSON access log and the OpenTelemetry tracer with its collector's cluster", async () => {
    const telemetry = { accessLog: {}, tracing: { host: "otel.example.test", port: 4317, serviceName: "gw", samplingPercent: 5 } };
    const doc: Doc = parseYaml(renderEnvoyConfig({ ...params, wasmPath: filterWasmPath, ...telemetry }));
    expect(hcmOf(doc).access_log[0].typed_config.log_format.json_format).toMatchObject({ pool: "%REQ(x-gateway-pool)%", tokens: "%FILTER_STATE(wasm.llm_gateway_usage:PLAIN)%" });
    expect(hcmOf(doc).access_log[0].name).toBe("envoy.access_loggers.stdout");
    expect(hcmOf(parseYaml(renderEnvoyConfig({ ...params, accessLog: { path: "/var/log/gw.log" } }))).access_log[0].typed_config.path).toBe("/var/log/gw.log");
    expect(hcmOf(doc).tracing.random_sampling).toEqual({ value: 5 });
    expect(doc.static_resources.clusters.map((c: Doc) => c.name)).toContain("llm_gateway_otlp");
    await validateEnvoyConfig(renderEnvoyXds({ ...params, wasmPath: filterWasmPath, ...telemetry }).bootstrap);
  }, 30_000);

  it("accepts model routes with a timeout and a rate limit, and claim gates, with the built filter", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gw-jwks-"));
    try {
      const jwksFile = join(dir, "jwks.json");
      const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
      writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...publicKey.export({ format: "jwk" }), kid: "k", alg: "ES256" }] }));
      await validateEnvoyConfig(renderEnvoyConfig({
        ...params,
        wasmPath: filterWasmPath,
        jwt: jwtSchema.parse({ issuer: "https://issuer.test", jwksFile }),
        modelRoutes: [
          { model: "chat", pools: ["llama", "org/qwen:32b"], timeoutMs: 1500 },
          { model: "batch", pools: ["llama"], rateLimit: { requestsPerS: 5, burst: 10 } },
        ],
        // Defaults for the filter's keys: the filter on this branch may not know the gates' keys yet.
        traffic: { critical: "none", debug: "off" },
      }));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);

  it("accepts config/traffic-example.yaml rendered (without the filter until it reads the gates' keys)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gw-jwks-"));
    try {
      const config = loadGatewayConfig(join(projectRoot, "config", "traffic-example.yaml"));
      const jwksFile = join(dir, "jwks.json");
      const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
      writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...publicKey.export({ format: "jwk" }), kid: "k", alg: "ES256" }] }));
      const p = envoyParamsFromGatewayConfig(config, { wasmPath: filterWasmPath });
      await validateEnvoyConfig(renderEnvoyConfig({ ...p, jwt: { ...p.jwt!, jwksFile } }));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);

  it("would reject a field this Envoy does not know (so the checks above mean something)", async () => {
    const yaml = renderEnvoyConfig({ ...params, wasmPath: filterWasmPath }).replace("failure_policy: FAIL_RELOAD", "failure_policy: FAIL_RELOADX");
    await expect(validateEnvoyConfig(yaml)).rejects.toThrow(/FAIL_RELOADX/);
  }, 30_000);
});
