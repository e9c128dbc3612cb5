// Envoy's Aggregated Discovery Service, state of the world: the aggregator as
// Envoy's control plane for everything that depends on the pools. Three
// resource types on one stream per Envoy:
// - CDS: each pool's EDS cluster (llm_gateway_pool_<pool>), a wildcard type:
//   every response carries all of them, and one left out is removed;
// - EDS: each pool's endpoints as the ClusterLoadAssignment of its cluster.
//   Envoy only ever connects to hosts listed here, so the endpoint set is the
//   gateway's list of known pods. A pod whose scrapes fail is UNHEALTHY while
//   another pod of its pool is not, so Envoy's own choices (the fallback
//   least-request, retries past the filter's list) skip it;
// - RDS: the listener's route table, by name.
// An Envoy rendered complete (every cluster and route static) asks for
// endpoints only and gets only those.
//
// Protocol, per type: Envoy's first request subscribes (resource names, or
// none for the wildcard CDS); every response carries the current resources
// it subscribes to, the type's version and a fresh nonce. Envoy answers each
// response with a request echoing that nonce: an ACK, or a NACK with
// error_detail, after which it keeps what it had before. A request echoing
// an older nonce is stale (it crossed a newer response on the wire) and is
// ignored; the answer to the newer response follows.
import type * as grpc from "@grpc/grpc-js";
import { isIP } from "node:net";
import { parseEndpoint } from "../config.js";
import { describePeer } from "./link-security.js";
import { adsServiceDefinition, encodeResource, type DiscoveryRequest, type DiscoveryResponse, type EncodedAny } from "./xds-codec.js";

export type { DiscoveryRequest, DiscoveryResponse } from "./xds-codec.js";

export const CLUSTER_TYPE = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
export const CLUSTER_LOAD_ASSIGNMENT_TYPE = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
export const ROUTE_CONFIGURATION_TYPE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
const TYPES = [CLUSTER_TYPE, CLUSTER_LOAD_ASSIGNMENT_TYPE, ROUTE_CONFIGURATION_TYPE] as const;
export type ResourceType = (typeof TYPES)[number];

const SHORT = {
  [CLUSTER_TYPE]: "clusters",
  [CLUSTER_LOAD_ASSIGNMENT_TYPE]: "endpoints",
  [ROUTE_CONFIGURATION_TYPE]: "routes",
} as const satisfies Record<ResourceType, string>;

export function poolClusterName(pool: string): string {
  return `llm_gateway_pool_${pool}`;
}

type AdsCall = grpc.ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>;

/**
 * Every open Envoy has confirmed the current resources, or why not: some
 * refused them (each keeps its last good ones; every other one accepted),
 * or some had not answered in time.
 */
export type Settled = { ok: true } | { ok: false; timedOut: boolean; reason: string };

export interface DiscoveryServer {
  /** For SnapshotServerOptions.services: registered on the aggregator's gRPC server. */
  readonly service: { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation };
  /**
   * Sets the endpoints ("ip:port" literals) of the pools named in `sets`;
   * other pools keep theirs. `failing` names, per pool, the endpoints whose
   * scrapes fail: UNHEALTHY, unless every endpoint of the pool is failing,
   * when all are HEALTHY (fail open, as the filter does: Envoy would
   * otherwise have no host to try). When a pool's assignment changes, the
   * version moves and every stream subscribed to that pool's cluster gets it.
   */
  setEndpoints(sets: ReadonlyMap<string, readonly string[]>, failing?: ReadonlyMap<string, ReadonlySet<string>>): void;
  /** Forgets the endpoints of pools whose clusters are gone. */
  dropEndpoints(pools: Iterable<string>): void;
  /**
   * Replaces every resource of a type (name -> the resource in proto3 JSON).
   * Throws, before anything changes, if one cannot be encoded. Subscribed
   * streams get the change; returns false when nothing changed.
   */
  setResources(type: typeof CLUSTER_TYPE | typeof ROUTE_CONFIGURATION_TYPE, resources: ReadonlyMap<string, Record<string, unknown>>): boolean;
  /**
   * Resolves once every open stream has accepted the current version of each
   * type it subscribes to, and an Envoy that takes its clusters from here
   * has the endpoints of every current cluster (so they are warm). A stream
   * that NACKed a current version is not waited for: once every other one
   * has accepted, the wait ends with the refusing Envoys' messages; streams
   * that close are not waited for either.
   */
  settled(timeoutMs: number): Promise<Settled>;
  /** The version of a type's current resources (0 before the first). */
  version(type: ResourceType): number;
  /** Open ADS streams. */
  streams(): number;
  /** Ends every stream with OK (Envoy reconnects to whoever serves next). */
  close(): void;
}

interface Resource {
  encoded: EncodedAny;
  /** Compared to tell a change (JSON of the resource as given). */
  key: string;
}

interface TypeState {
  resources: Map<string, Resource>;
  version: number;
}

/** One type on one stream. */
interface Subscription {
  /** Resource names asked for; "*" for all of a wildcard type. */
  names: Set<string> | "*";
  /** Nonce of the latest response sent; requests echoing another one are stale. */
  nonce: string;
  /** Version in that response. */
  sentVersion: number;
  /** Envoy answered the latest response (ACK or NACK). */
  answered: boolean;
  /** Its NACK message, when it refused the latest response. */
  rejected: string | null;
  /** Names asked for that no resource answers to, already logged. */
  unknown: Set<string>;
}

interface Stream {
  id: number;
  call: AdsCall;
  node: string;
  opened: boolean;
  types: Map<ResourceType, Subscription>;
}

interface Waiter {
  settle(): boolean;
}

export function createDiscoveryServer(opts: { log: (line: string) => void; onRejected?: (type: (typeof SHORT)[ResourceType]) => void }): DiscoveryServer {
  const { log } = opts;
  const state = new Map<ResourceType, TypeState>(TYPES.map((t) => [t, { resources: new Map(), version: 0 }]));
  const streams = new Set<Stream>();
  const waiters = new Set<Waiter>();
  let nonces = 0;
  let nextStreamId = 1;

  const wildcardAllowed = (type: ResourceType) => type === CLUSTER_TYPE;

  function send(s: Stream, type: ResourceType, sub: Subscription): void {
    const { resources, version } = state.get(type)!;
    const out: EncodedAny[] = [];
    if (sub.names === "*") {
      for (const r of resources.values()) out.push(r.encoded);
    } else {
      for (const name of sub.names) {
        const r = resources.get(name);
        if (r) out.push(r.encoded);
        else if (!sub.unknown.has(name)) {
          // An Envoy rendered from another config: its cluster stays empty and
          // warms up only at its initial_fetch_timeout.
          sub.unknown.add(name);
          log(`ads stream ${s.id} (${s.node}) asks for ${name}, which is not served here`);
        }
      }
    }
    sub.nonce = String(++nonces);
    sub.sentVersion = version;
    sub.answered = false;
    sub.rejected = null;
    s.call.write({ version_info: String(version), type_url: type, nonce: sub.nonce, resources: out });
  }

  /**
   * Sends `type` to every stream subscribed to one of `changed` (any, for a
   * wildcard subscription). The others have all they asked for at the new
   * version already, and are taken to be at it.
   */
  function push(type: ResourceType, changed: ReadonlySet<string>): void {
    for (const s of streams) {
      const sub = s.types.get(type);
      if (!sub) continue;
      if (sub.names === "*" || [...changed].some((n) => (sub.names as Set<string>).has(n))) send(s, type, sub);
      else sub.sentVersion = state.get(type)!.version;
    }
  }

  function replace(type: ResourceType, next: Map<string, Resource>): boolean {
    const st = state.get(type)!;
    const changed = new Set<string>();
    for (const [name, r] of next) if (st.resources.get(name)?.key !== r.key) changed.add(name);
    for (const name of st.resources.keys()) if (!next.has(name)) changed.add(name);
    if (changed.size === 0) return false;
    st.resources = next;
    st.version++;
    push(type, changed);
    return true;
  }

  function onRequest(s: Stream, req: DiscoveryRequest): void {
    const type = req.type_url as ResourceType;
    if (!state.has(type)) {
      log(`ads stream ${s.id} (${s.node}): ignoring a request for type ${JSON.stringify(req.type_url ?? "")}`);
      return;
    }
    const nonce = req.response_nonce ?? "";
    let sub = s.types.get(type);
    // An empty nonce opens a subscription (first request, or after a reconnect).
    if (nonce !== "" && nonce !== sub?.nonce) return;
    if (sub && nonce !== "") {
      sub.answered = true;
      if (req.error_detail) {
        sub.rejected = req.error_detail.message ?? "no reason given";
        // Sending the same version again would only be rejected again; the
        // next change sends a new one.
        log(`ads stream ${s.id} (${s.node}) rejected ${SHORT[type]} version ${sub.sentVersion} and keeps its previous ones: ${sub.rejected}`);
        opts.onRejected?.(SHORT[type]);
      }
    }
    const asked = req.resource_names ?? [];
    const names: Set<string> | "*" = asked.includes("*") || (asked.length === 0 && wildcardAllowed(type)) ? "*" : new Set(asked);
    const same =
      sub !== undefined && nonce !== "" &&
      (names === "*" || sub.names === "*" ? names === sub.names : names.size === sub.names.size && [...names].every((n) => (sub!.names as Set<string>).has(n)));
    if (!same) {
      sub ??= { names, nonce: "", sentVersion: 0, answered: false, rejected: null, unknown: new Set() };
      sub.names = names;
      s.types.set(type, sub);
      send(s, type, sub);
    }
    checkWaiters();
  }

  function stream(call: AdsCall): void {
    const s: Stream = { id: nextStreamId++, call, node: describePeer(call), opened: false, types: new Map() };
    streams.add(s);
    let gone = false;
    const forget = (why: string) => {
      if (gone) return;
      gone = true;
      streams.delete(s);
      log(`ads stream ${s.id} (${s.node}) ${why} (${streams.size} open)`);
      checkWaiters();
    };
    call.on("data", (req: DiscoveryRequest) => {
      if (!s.opened) {
        s.opened = true;
        const id = req.node?.id;
        if (id) s.node = `${id}@${s.node}`;
        log(`ads stream ${s.id} opened by ${s.node} (${streams.size} open)`);
      }
      onRequest(s, req);
    });
    call.on("end", () => {
      forget("half-closed by the client");
      call.end();
    });
    call.on("cancelled", () => forget("cancelled"));
    call.on("error", (err: Error) => forget(`failed: ${err.message}`));
    call.on("close", () => forget("closed"));
  }

  /** What `s` lacks of the current resources (null: nothing); a NACK of a current version is final. */
  function pending(s: Stream): { rejected: string } | { waiting: string } | null {
    for (const [type, sub] of s.types) {
      const current = state.get(type)!.version;
      if (sub.rejected !== null && sub.sentVersion === current) return { rejected: `${SHORT[type]} version ${current}: ${sub.rejected}` };
      if (sub.sentVersion !== current || !sub.answered) return { waiting: SHORT[type] };
    }
    // Clusters it takes from here are warm once their endpoints are in.
    if (s.types.has(CLUSTER_TYPE)) {
      const eds = s.types.get(CLUSTER_LOAD_ASSIGNMENT_TYPE);
      for (const name of state.get(CLUSTER_TYPE)!.resources.keys()) {
        const covered = eds !== undefined && (eds.names === "*" || eds.names.has(name));
        if (!covered) return { waiting: `endpoints of ${name}` };
      }
    }
    return null;
  }

  function checkWaiters(): void {
    for (const w of waiters) if (w.settle()) waiters.delete(w);
  }

  return {
    service: { definition: adsServiceDefinition(), implementation: { StreamAggregatedResources: stream } },
    setEndpoints(sets, failing = new Map()) {
      const next = new Map(state.get(CLUSTER_LOAD_ASSIGNMENT_TYPE)!.resources);
      const described: string[] = [];
      for (const [pool, addresses] of sets) {
        const bad = failing.get(pool) ?? new Set<string>();
        const hosts = [...new Set(addresses)].sort().map((a) => {
          const hp = parseEndpoint(a);
          if (!hp || isIP(hp.host) === 0) throw new Error(`pool ${pool}: endpoint ${a} is not an ip:port literal`);
          return { address: a, host: hp.host, port: hp.port };
        });
        const anyGood = hosts.some((h) => !bad.has(h.address));
        const unhealthy = (h: { address: string }) => anyGood && bad.has(h.address);
        const cluster = poolClusterName(pool);
        const assignment = {
          cluster_name: cluster,
          endpoints: [{
            lb_endpoints: hosts.map((h) => ({
              endpoint: { address: { socket_address: { address: h.host, port_value: h.port } } },
              health_status: unhealthy(h) ? "UNHEALTHY" : "HEALTHY",
            })),
          }],
        };
        const key = JSON.stringify(assignment);
        if (next.get(cluster)?.key === key) continue;
        next.set(cluster, { key, encoded: encodeResource(CLUSTER_LOAD_ASSIGNMENT_TYPE, assignment) });
        described.push(`${cluster}=[${hosts.map((h) => (unhealthy(h) ? `${h.address} unhealthy` : h.address)).join(",")}]`);
      }
      if (described.length === 0) return;
      replace(CLUSTER_LOAD_ASSIGNMENT_TYPE, next);
      log(`endpoints version ${state.get(CLUSTER_LOAD_ASSIGNMENT_TYPE)!.version}: ${described.join(" ")}`);
    },
    dropEndpoints(pools) {
      const next = new Map(state.get(CLUSTER_LOAD_ASSIGNMENT_TYPE)!.resources);
      let dropped = false;
      for (const pool of pools) dropped = next.delete(poolClusterName(pool)) || dropped;
      // Nobody subscribes to a removed cluster's endpoints: no stream is sent anything.
      if (dropped) replace(CLUSTER_LOAD_ASSIGNMENT_TYPE, next);
    },
    setResources(type, resources) {
      const next = new Map<string, Resource>();
      for (const [name, json] of resources) {
        next.set(name, { key: JSON.stringify(json), encoded: encodeResource(type, json) });
      }
      const changed = replace(type, next);
      if (changed) log(`${SHORT[type]} version ${state.get(type)!.version}: ${[...resources.keys()].join(", ") || "none"}`);
      return changed;
    },
    settled(timeoutMs) {
      return new Promise<Settled>((resolve) => {
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          const late = [...streams].flatMap((s) => {
            const p = pending(s);
            return p && "waiting" in p ? [`ads stream ${s.id} (${s.node}) waits for ${p.waiting}`] : [];
          });
          resolve({ ok: false, timedOut: true, reason: `not confirmed within ${timeoutMs} ms: ${late.join("; ")}` });
        }, timeoutMs);
        const waiter: Waiter = {
          settle() {
            const rejected: string[] = [];
            for (const s of streams) {
              const p = pending(s);
              if (p && "waiting" in p) return false;
              if (p) rejected.push(`Envoy (ads stream ${s.id}, ${s.node}) rejected ${p.rejected}`);
            }
            clearTimeout(timer);
            resolve(rejected.length === 0 ? { ok: true } : { ok: false, timedOut: false, reason: rejected.join("; ") });
            return true;
          },
        };
        if (!waiter.settle()) waiters.add(waiter);
      });
    },
    version: (type) => state.get(type)!.version,
    streams: () => streams.size,
    close() {
      for (const s of streams) s.call.end();
      streams.clear();
      checkWaiters();
    },
  };
}
