// Where each pool's pods come from: one discovery source per pool, built from
// the gateway config. Per-pool sources let a pool's source be replaced while
// the others keep running.
import { isIP } from "node:net";
import { parseEndpoint, type GatewayConfig, type PoolConfig } from "../config.js";
import { dnsSource, type Lookup } from "./dns.js";
import { inferencePoolSource } from "./inference-pool.js";
import { kubernetesSource } from "./kubernetes.js";
import type { DiscoverySink, DiscoverySource, Target } from "./source.js";
import { staticSource, type ConfiguredEndpoint } from "./static.js";

export interface DiscoveryOptions {
  /** For DNS names (tests pass their own). */
  lookup?: Lookup;
  log: (line: string) => void;
}

/** The pool's `endpoints` entries with their configured capacities. */
function configuredEndpoints(pool: PoolConfig): ConfiguredEndpoint[] {
  return pool.endpoints.map((configured, i) => {
    const hp = parseEndpoint(configured);
    if (!hp) throw new Error(`pool ${pool.name}: bad endpoint ${configured}`); // config validation prevents this
    return { configured, host: hp.host, port: hp.port, capacity: pool.capacities?.[i] };
  });
}

function poolSource(pool: PoolConfig, opts: DiscoveryOptions): DiscoverySource {
  if (pool.kubernetes) return kubernetesSource({ name: pool.name, kubernetes: pool.kubernetes }, { log: opts.log });
  if (pool.inferencePool) return inferencePoolSource({ name: pool.name, inferencePool: pool.inferencePool }, { log: opts.log });
  const endpoints = configuredEndpoints(pool);
  const literals = endpoints.filter((e) => isIP(e.host) !== 0);
  const names = endpoints.filter((e) => isIP(e.host) === 0);
  const sources = [...(literals.length > 0 ? [staticSource(pool.name, literals)] : []), ...(names.length > 0 ? [dnsSource(pool.name, names, opts)] : [])];
  return sources.length === 1 ? sources[0] : union(sources);
}

/** Every pool's source, by pool name. */
export function discoverySources(config: GatewayConfig, opts: DiscoveryOptions): Map<string, DiscoverySource> {
  return new Map(config.pools.map((pool) => [pool.name, poolSource(pool, opts)]));
}

/** Several sources feeding the same pools: a pool's set is the union of theirs (an address reported twice counts once). */
function union(sources: readonly DiscoverySource[]): DiscoverySource {
  return {
    async start(sink) {
      const sets = sources.map(() => new Map<string, Target[]>());
      const merged = (pool: string) => {
        const byAddress = new Map<string, Target>();
        for (const set of sets) for (const t of set.get(pool) ?? []) if (!byAddress.has(t.address)) byAddress.set(t.address, t);
        return [...byAddress.values()];
      };
      const member = (i: number): DiscoverySink => ({
        targets(pool, targets) {
          sets[i].set(pool, targets);
          sink.targets(pool, merged(pool));
        },
        event: (pool, kind, detail) => sink.event(pool, kind, detail),
      });
      await Promise.all(sources.map((s, i) => s.start(member(i))));
    },
    notAnswering(pool, address) {
      for (const s of sources) s.notAnswering?.(pool, address);
    },
    close() {
      for (const s of sources) s.close();
    },
  };
}
