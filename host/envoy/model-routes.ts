// Routes per model name and per stream: each model's route before its pool's
// (timeout, rate limit), and a streamed twin of every pool route with a
// per-try idle timeout.
import { isMap, isSeq, type Document, type Node } from "yaml";
import { BUILTIN_PROFILES } from "../config.js";
import { MODEL_NAME_HEADER, POOL_HEADER, STREAM_HEADER, type EnvoyConfigParams, type ModelRouteParams } from "./params.js";
import { checkInt, httpFilters, POOL_NAME, ROUTES } from "./template.js";

const LOCAL_RATELIMIT = "envoy.filters.http.local_ratelimit";
const LOCAL_RATELIMIT_TYPE = "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit";
const ALL_REQUESTS = (runtimeKey: string) => ({ runtime_key: runtimeKey, default_value: { numerator: 100, denominator: "HUNDRED" } });

/** Envoy's Duration text for a whole number of milliseconds. */
const duration = (ms: number) => `${ms / 1000}s`;

/** A stat-name segment: Envoy splits stat names at dots, and model names hold them (llama-3.1-8b). */
const statSegment = (model: string) => model.replace(/[^A-Za-z0-9_-]/g, "_");

/**
 * One route per (model, pool) before that pool's route: the same match plus
 * x-gateway-model-name, the same cluster and retries, the model's timeout,
 * and its rate limit as Envoy's local_ratelimit per-route config (a token
 * bucket per route, shared by the workers). The filter sets the headers and
 * clears the route cache, so Envoy picks among these after the filter ran.
 */
export function withModelRoutes(doc: Document, routes: ModelRouteParams[], pools: string[]): void {
  if (routes.length === 0) return;
  const seq = doc.getIn(ROUTES);
  if (!isSeq(seq)) throw new Error(`the Envoy template has no ${ROUTES.join(".")} list`);
  const seen = new Set<string>();
  for (const r of routes) {
    if (typeof r.model !== "string" || !POOL_NAME.test(r.model)) throw new Error(`model name ${JSON.stringify(r.model)} must match ${POOL_NAME}`);
    if (seen.has(r.model)) throw new Error(`model ${r.model} has two routes`);
    seen.add(r.model);
    if (r.pools.length === 0) throw new Error(`model route ${r.model} lands in no pool`);
    if (r.rateLimit && r.pools.length > 1) throw new Error(`model route ${r.model}: a rate limit needs a single pool (one token bucket per route)`);
    for (const pool of r.pools) {
      if (!pools.includes(pool)) throw new Error(`model route ${r.model}: unknown pool ${pool}`);
      const at = seq.items.findIndex((item) => isPoolRoute(item, pool));
      if (at < 0) throw new Error(`the Envoy template has no route for pool ${pool}`);
      seq.items.splice(at, 0, doc.createNode(modelRoute(r, pool, (seq.items[at] as Node).toJSON())));
    }
  }
  if (routes.some((r) => r.rateLimit)) withRateLimitFilter(doc);
}

/**
 * Envoy's local rate limit filter, once, last before the router: after our
 * filter has set the headers the route is matched on, and after the buffer,
 * so a 429 leaves HTTP/1.1 connections open. No token bucket here and no
 * filter_enabled (0% by default): only a route's own config limits anything.
 */
export function withRateLimitFilter(doc: Document): void {
  const filters = httpFilters(doc).items;
  if (filters.some((f) => isMap(f) && f.get("name") === LOCAL_RATELIMIT)) return;
  const router = filters.findIndex((f) => isMap(f) && f.get("name") === "envoy.filters.http.router");
  if (router < 0) throw new Error("the Envoy template has no router filter");
  filters.splice(router, 0, doc.createNode({
    name: LOCAL_RATELIMIT,
    typed_config: { "@type": LOCAL_RATELIMIT_TYPE, stat_prefix: "llm_gateway_model_rate_limit" },
  }));
}

type HeaderMatch = { name: string; string_match?: { exact?: string } };
type RouteJson = { match: { headers: HeaderMatch[] }; route: Record<string, unknown> } & Record<string, unknown>;

/** The value a route's match requires of a header exactly; undefined when it requires none. */
function exactHeader(route: unknown, name: string): string | undefined {
  const headers = (route as { match?: { headers?: HeaderMatch[] } }).match?.headers ?? [];
  return headers.find((h) => h.name === name)?.string_match?.exact;
}

/** The template's inference route for `pool` (x-gateway-pool matched, no model name). */
function isPoolRoute(item: unknown, pool: string): boolean {
  if (!isMap(item)) return false;
  const route = item.toJSON();
  return exactHeader(route, POOL_HEADER) === pool && exactHeader(route, MODEL_NAME_HEADER) === undefined;
}

/** A route's per-try idle timeout for streams: the model's own profile's, else the pool's profile's. */
export function streamIdleOf(params: EnvoyConfigParams): (pool: string, model: string | undefined) => number {
  const byModel = new Map((params.modelRoutes ?? []).flatMap((r) => (r.streamIdleMs === undefined ? [] : [[r.model, r.streamIdleMs] as const])));
  return (pool, model) => {
    const ms = (model === undefined ? undefined : byModel.get(model)) ?? params.streamIdleMs?.[pool] ?? BUILTIN_PROFILES.latency.deadlines.streamIdleMs;
    return checkInt(`streamIdleMs of ${model === undefined ? `pool ${pool}` : `model ${model} on ${pool}`}`, ms, 1, 2 ** 31 - 1);
  };
}

/**
 * Puts before every route to a pool (pool and model routes alike) its twin
 * for streamed requests: the same match plus x-gateway-stream (the filter's),
 * the same action plus Envoy's per-try idle timeout. That timer restarts with
 * every byte from the pod, so before the response starts it moves a silent
 * try to the next pod, and after it cuts a stalled stream. A non-streamed
 * answer sends nothing until it is done, so its routes get none. A
 * rate-limited model route gets no twin: Envoy keeps a token bucket per
 * route, and two routes would double the model's limit.
 */
export function withStreamRoutes(doc: Document, idleMs: (pool: string, model: string | undefined) => number): void {
  const seq = doc.getIn(ROUTES);
  if (!isSeq(seq)) throw new Error(`the Envoy template has no ${ROUTES.join(".")} list`);
  seq.items = seq.items.flatMap((item) => {
    const route = (item as Node).toJSON() as RouteJson;
    const pool = exactHeader(route, POOL_HEADER);
    const rateLimited = (route.typed_per_filter_config as Record<string, unknown> | undefined)?.[LOCAL_RATELIMIT] !== undefined;
    if (pool === undefined || rateLimited) return [item];
    const retryPolicy = { ...(route.route.retry_policy as Record<string, unknown>), per_try_idle_timeout: duration(idleMs(pool, exactHeader(route, MODEL_NAME_HEADER))) };
    const stream: Record<string, unknown> = {
      ...route,
      match: { ...route.match, headers: [...route.match.headers, { name: STREAM_HEADER, string_match: { exact: "1" } }] },
      route: { ...route.route, retry_policy: retryPolicy },
    };
    if (typeof route.name === "string") stream.name = `${route.name}, streamed`;
    return [doc.createNode(stream), item];
  });
}

function modelRoute(r: ModelRouteParams, pool: string, poolRoute: RouteJson): Record<string, unknown> {
  const route: Record<string, unknown> = { ...poolRoute.route };
  if (r.timeoutMs !== undefined) route.timeout = duration(checkInt(`model ${r.model} timeoutMs`, r.timeoutMs, 1, 2 ** 31 - 1));
  const out: Record<string, unknown> = {
    name: `model ${r.model} on ${pool}`,
    match: { ...poolRoute.match, headers: [...poolRoute.match.headers, { name: MODEL_NAME_HEADER, string_match: { exact: r.model } }] },
    route,
  };
  if (r.rateLimit) {
    const rps = checkInt(`model ${r.model} requestsPerS`, r.rateLimit.requestsPerS, 1, 2 ** 31 - 1);
    const burst = checkInt(`model ${r.model} burst`, r.rateLimit.burst, rps, 2 ** 31 - 1);
    out.typed_per_filter_config = {
      [LOCAL_RATELIMIT]: {
        "@type": LOCAL_RATELIMIT_TYPE,
        stat_prefix: `llm_gateway_model_${statSegment(r.model)}`,
        token_bucket: { max_tokens: burst, tokens_per_fill: rps, fill_interval: "1s" },
        filter_enabled: ALL_REQUESTS("llm_gateway.model_rate_limit.enabled"),
        filter_enforced: ALL_REQUESTS("llm_gateway.model_rate_limit.enforced"),
        // The bucket refills every second, so a token is there by then.
        response_headers_to_add: [{ header: { key: "retry-after", value: "1" }, append_action: "OVERWRITE_IF_EXISTS_OR_ADD" }],
      },
    };
  }
  return out;
}
