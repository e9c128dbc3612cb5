// Applies a new gateway config to a running gateway, make before break:
// 1. refuse an edit to a field only a restart can change, naming it;
// 2. start on the new pools (their pods discovered, scraped once and served
//    as endpoints) while the config in force still decides;
// 3. send Envoy the clusters and the route table of the new config plus the
//    pools it drops, and wait until every connected Envoy has accepted them
//    and has the new clusters' endpoints. The aggregator itself judged the
//    config (schema, rendering, encoding), so once sent it is committed: an
//    Envoy that NACKs keeps its last good resources (logged with its node id,
//    counted), and neither holds back nor rolls back the others;
// 4. put the new config in force: the next snapshot carries the new pools,
//    models, weights and profiles, so the filter routes to them only now;
// 5. a while later (drainMs), when every filter has that snapshot, remove
//    the dropped pools' routes and clusters.
// Requests of models that exist throughout never meet a missing route or
// cluster, and a dropped pool's model answers 404 from the filter.
// Reloads run one at a time, in order.
import { xdsResourcesFromGatewayConfig, type XdsResources } from "../envoy/config.js";
import type { GatewayConfig, PoolConfig } from "../config.js";
import { describeChanges, fixedFieldChanges } from "./config-diff.js";
import type { AggregatorTelemetry } from "./telemetry.js";
import { CLUSTER_TYPE, ROUTE_CONFIGURATION_TYPE, type DiscoveryServer } from "./xds.js";

export type ReloadResult = { applied: true; changes: string[] } | { applied: false; reason: string };

/** The aggregator's side of a reload; `P` is whatever it prepared for the new config. */
export interface ReloadTarget<P> {
  /** The config in force. */
  current(): GatewayConfig;
  /** Readies `next`'s pools (pods found, scraped once, endpoints served) without putting `next` in force. */
  prepare(next: GatewayConfig): Promise<P>;
  /** Puts the prepared config in force and pushes its snapshot. */
  commit(prepared: P): void;
  /** Drops what prepare started (a refused reload). */
  abandon(prepared: P): void;
}

export interface ReloaderOptions<P> {
  target: ReloadTarget<P>;
  discovery: DiscoveryServer;
  log: (line: string) => void;
  telemetry: Pick<AggregatorTelemetry, "reload">;
  /** How long Envoy has to accept new resources before the reload goes ahead anyway (logged); default 10 s. */
  confirmTimeoutMs?: number;
  /** How long a dropped pool's route and cluster outlive the snapshot without it; default 5 s. */
  drainMs?: number;
  /** The resources for a config; default the Envoy template's (host/envoy/config.ts). */
  resourcesFor?: (config: GatewayConfig) => XdsResources;
}

/** Serves the config's clusters and route table over ADS from the start, and changes them with each reload. */
export interface Reloader {
  /** Applies `next`, or refuses it and keeps the config in force; logged and counted either way. */
  reload(next: GatewayConfig): Promise<ReloadResult>;
  /** Counts and logs a reload that never had a config (an unreadable or invalid file). */
  refuse(reason: string): ReloadResult;
  /** Cancels a pending removal of dropped pools; later reloads are refused. */
  close(): void;
}

const DEFAULT_CONFIRM_TIMEOUT_MS = 10_000;
const DEFAULT_DRAIN_MS = 5_000;

/** Serves the config's clusters and route table; throws if one cannot be encoded (nothing changes then). */
export function serveResources(discovery: DiscoveryServer, resources: XdsResources): void {
  const byName = (list: Array<Record<string, unknown>>) => new Map(list.map((r) => [String(r.name), r]));
  const clusters = byName(resources.clusters);
  const routes = byName(resources.routeConfigs);
  discovery.setResources(CLUSTER_TYPE, clusters);
  discovery.setResources(ROUTE_CONFIGURATION_TYPE, routes);
}

export function createReloader<P>(opts: ReloaderOptions<P>): Reloader {
  const { target, discovery, log, telemetry } = opts;
  const confirmTimeoutMs = opts.confirmTimeoutMs ?? DEFAULT_CONFIRM_TIMEOUT_MS;
  const drainMs = opts.drainMs ?? DEFAULT_DRAIN_MS;
  const resourcesFor = opts.resourcesFor ?? ((config: GatewayConfig) => xdsResourcesFromGatewayConfig(config));

  /** Pools whose route and cluster Envoy has: the config's, plus dropped ones not yet removed. */
  let served: PoolConfig[] = target.current().pools;
  let resources = resourcesFor(target.current());
  serveResources(discovery, resources);
  let removal: NodeJS.Timeout | undefined;
  let queue: Promise<unknown> = Promise.resolve();
  let closed = false;

  const serial = <T>(work: () => Promise<T>): Promise<T> => {
    const run = queue.then(work);
    queue = run.catch(() => {});
    return run;
  };

  function refused(reason: string): ReloadResult {
    log(`config reload refused, the config in force stays: ${reason}`);
    telemetry.reload("refused");
    return { applied: false, reason };
  }

  /** The resources of `config` with the routes and clusters of `lingering` pools kept. */
  const resourcesWith = (config: GatewayConfig, lingering: PoolConfig[]) =>
    resourcesFor(lingering.length === 0 ? config : { ...config, pools: [...config.pools, ...lingering] });

  async function apply(next: GatewayConfig): Promise<ReloadResult> {
    if (closed) return refused("the aggregator is shutting down");
    const current = target.current();
    const fixed = fixedFieldChanges(current, next);
    if (fixed.length > 0) return refused(fixed.join("; "));
    const changes = describeChanges(current, next);
    if (changes.length === 0) {
      log("config reload: no change");
      telemetry.reload("applied");
      return { applied: true, changes };
    }

    const kept = new Set(next.pools.map((p) => p.name));
    const lingering = served.filter((p) => !kept.has(p.name));
    let nextResources: XdsResources;
    try {
      nextResources = resourcesWith(next, lingering);
    } catch (err) {
      return refused(`the Envoy resources cannot be rendered: ${(err as Error).message}`);
    }

    let prepared: P;
    try {
      prepared = await target.prepare(next);
    } catch (err) {
      return refused(`the new pools cannot be started: ${(err as Error).message}`);
    }
    const previous = resources;
    try {
      serveResources(discovery, nextResources);
    } catch (err) {
      serveResources(discovery, previous);
      target.abandon(prepared);
      return refused(`the Envoy resources cannot be encoded: ${(err as Error).message}`);
    }
    resources = nextResources;
    const settled = await discovery.settled(confirmTimeoutMs);
    // A slow or refusing Envoy runs on what it had; models that exist
    // throughout never depended on the new resources, and the new ones
    // answer 503 there until it takes them.
    if (!settled.ok && settled.timedOut) log(`config reload goes ahead without every Envoy's confirmation: ${settled.reason}`);
    if (!settled.ok && !settled.timedOut) log(`config reload goes ahead; Envoys that refused it keep their last good resources: ${settled.reason}`);

    target.commit(prepared);
    served = [...next.pools, ...lingering];
    if (lingering.length > 0) scheduleRemoval(next, lingering);
    log(`config reload applied: ${changes.join("; ")}`);
    telemetry.reload("applied");
    return { applied: true, changes };
  }

  function scheduleRemoval(config: GatewayConfig, dropped: PoolConfig[]): void {
    removal = setTimeout(() => {
      void serial(async () => {
        // A reload applied since then keeps or drops these pools itself.
        if (closed || target.current() !== config) return;
        const final = resourcesFor(config);
        serveResources(discovery, final);
        resources = final;
        served = config.pools;
        const settled = await discovery.settled(confirmTimeoutMs);
        if (!settled.ok) log(`removing the routes and clusters of dropped pools: ${settled.reason}`);
        discovery.dropEndpoints(dropped.map((p) => p.name));
        log(`routes and clusters of dropped pools removed: ${dropped.map((p) => p.name).join(", ")}`);
      });
    }, drainMs);
    removal.unref();
  }

  return {
    reload: (next) => serial(() => apply(next)),
    refuse: refused,
    close() {
      closed = true;
      clearTimeout(removal);
    },
  };
}
