// A pool's DNS-name endpoints from the config: each name stands for every
// address it resolves to (a headless Service lists one per pod), re-resolved
// periodically, sooner while it has none or one of them stops answering.
import { lookup as dnsLookup } from "node:dns/promises";
import { formatHostPort } from "../config.js";
import type { DiscoverySink, DiscoverySource, Target } from "./source.js";
import type { ConfiguredEndpoint } from "./static.js";

/** Resolves a name to its addresses (node:dns lookup with all: true; tests pass their own). */
export type Lookup = (hostname: string) => Promise<Array<{ address: string; family: number }>>;

/** Re-resolve a name this often while its addresses answer... */
export const RESOLVE_EVERY_MS = 30_000;
/** ...and this often while it has none, or one stops answering: a restarted container may have a new IP. */
export const RESOLVE_RETRY_MS = 1_000;
const DNS_TIMEOUT_MS = 2_000;

export interface DnsSourceOptions {
  lookup?: Lookup;
  log: (line: string) => void;
}

interface Name {
  ep: ConfiguredEndpoint;
  /** Sorted IP literals of the last good answer. */
  ips: string[];
  resolving: boolean;
  lastResolveMs: number;
  timer: NodeJS.Timeout | null;
  /** Last lookup error, so only changes get logged. */
  lastError: string | null;
}

/**
 * One address family per name: IPv4 when it has any, else IPv6. A dual-stack
 * name lists the same pod under both, and "localhost" may list ::1 where the
 * pod only listens on 127.0.0.1.
 */
function chooseAddresses(answers: Array<{ address: string; family: number }>): string[] {
  const v4 = answers.filter((a) => a.family === 4);
  return [...new Set((v4.length > 0 ? v4 : answers).map((a) => a.address))].sort();
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export function dnsSource(pool: string, endpoints: readonly ConfiguredEndpoint[], opts: DnsSourceOptions): DiscoverySource {
  const lookup = opts.lookup ?? ((hostname: string) => dnsLookup(hostname, { all: true }));
  const names: Name[] = endpoints.map((ep) => ({ ep, ips: [], resolving: false, lastResolveMs: 0, timer: null, lastError: null }));
  let sink: DiscoverySink | null = null;
  let reported = new Set<string>();
  let closed = false;

  /** Every name's addresses, in config order; an address two names share counts once. */
  function report(): void {
    const targets = new Map<string, Target>();
    for (const { ep, ips } of names) {
      for (const ip of ips) {
        const address = formatHostPort(ip, ep.port);
        if (!targets.has(address)) targets.set(address, { ip, port: ep.port, address, name: `${ep.configured}@${ip}`, hostHeader: ep.configured, capacity: ep.capacity });
      }
    }
    for (const a of reported) if (!targets.has(a)) sink!.event(pool, "removed", a);
    for (const a of targets.keys()) if (!reported.has(a)) sink!.event(pool, "added", a);
    reported = new Set(targets.keys());
    sink!.targets(pool, [...targets.values()]);
  }

  const period = (name: Name) => (name.ips.length > 0 && name.lastError === null ? RESOLVE_EVERY_MS : RESOLVE_RETRY_MS);

  function schedule(name: Name, delayMs: number): void {
    if (closed) return;
    if (name.timer) clearTimeout(name.timer);
    name.timer = setTimeout(async () => {
      if (await resolve(name)) report();
      schedule(name, period(name));
    }, delayMs);
  }

  /** Looks the name up once; returns whether its addresses changed. A failed lookup keeps the last ones: the pods may well still be there. */
  async function resolve(name: Name): Promise<boolean> {
    name.resolving = true;
    name.lastResolveMs = Date.now();
    try {
      const ips = chooseAddresses(await withTimeout(lookup(name.ep.host), DNS_TIMEOUT_MS, `DNS lookup of ${name.ep.host}`));
      if (closed) return false;
      if (name.lastError !== null) opts.log(`endpoint ${name.ep.configured} resolves again`);
      name.lastError = null;
      if (ips.length === 0 || (ips.length === name.ips.length && ips.every((ip, i) => ip === name.ips[i]))) return false;
      opts.log(`endpoint ${name.ep.configured} resolved to ${ips.join(", ")}${name.ips.length > 0 ? ` (was ${name.ips.join(", ")})` : ""}`);
      name.ips = ips;
      return true;
    } catch (err) {
      if (closed) return false;
      const message = (err as Error).message;
      if (message !== name.lastError) {
        opts.log(`endpoint ${name.ep.configured}: ${message}`);
        sink!.event(pool, "error", message);
      }
      name.lastError = message;
      return false;
    } finally {
      name.resolving = false;
    }
  }

  return {
    async start(s) {
      sink = s;
      await Promise.all(names.map(resolve));
      report();
      for (const name of names) schedule(name, period(name));
    },
    notAnswering(p, address) {
      if (p !== pool || closed) return;
      for (const name of names) {
        const due = Date.now() - name.lastResolveMs >= RESOLVE_RETRY_MS;
        if (due && !name.resolving && name.ips.some((ip) => formatHostPort(ip, name.ep.port) === address)) schedule(name, 0);
      }
    },
    close() {
      closed = true;
      for (const name of names) if (name.timer) clearTimeout(name.timer);
    },
  };
}
