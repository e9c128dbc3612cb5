// A pool's IP-literal endpoints from the config: a fixed target set, reported
// once at start.
import { formatHostPort } from "../config.js";
import type { DiscoverySink, DiscoverySource, Target } from "./source.js";

/** One `endpoints` entry of a pool, split: `configured` is the text as the file gave it. */
export interface ConfiguredEndpoint {
  configured: string;
  host: string;
  port: number;
  capacity?: number;
}

/** A literal endpoint as a target: its own address, name and Host header. */
export function literalTarget(ep: ConfiguredEndpoint): Target {
  return { ip: ep.host, port: ep.port, address: formatHostPort(ep.host, ep.port), name: ep.configured, hostHeader: ep.configured, capacity: ep.capacity };
}

export function staticSource(pool: string, endpoints: readonly ConfiguredEndpoint[]): DiscoverySource {
  return {
    async start(sink: DiscoverySink) {
      const targets = endpoints.map(literalTarget);
      for (const t of targets) sink.event(pool, "added", t.address);
      sink.targets(pool, targets);
    },
    close() {},
  };
}
