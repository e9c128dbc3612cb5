// Envoy's Aggregated Discovery Service, state of the world, for one resource
// type: each pool's endpoints as a ClusterLoadAssignment named after the pool's
// EDS cluster (llm_gateway_pool_<pool>). Envoy only ever connects to hosts
// listed here, so the endpoint set is the gateway's list of known pods.
//
// Protocol (one bidirectional stream per Envoy): Envoy's first request names
// the clusters it wants; every response carries the whole current assignment
// of each subscribed cluster, a version and a fresh nonce. Envoy answers each
// response with a request echoing that nonce: an ACK, or a NACK with
// error_detail. A request echoing an older nonce is stale (it crossed a newer
// response on the wire) and is ignored; the answer to the newer response
// follows.
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { createRequire } from "node:module";
import { isIP } from "node:net";
import { dirname, join } from "node:path";
import { parseEndpoint } from "../config.js";

export const CLUSTER_LOAD_ASSIGNMENT_TYPE = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

export function poolClusterName(pool: string): string {
  return `llm_gateway_pool_${pool}`;
}

// Envoy's API protos ship with @grpc/grpc-js-xds; nothing is copied here.
const PROTO_ROOT = join(dirname(createRequire(import.meta.url).resolve("@grpc/grpc-js-xds/package.json")), "deps");

// Loaded once, on first use: parsing Envoy's API takes ~0.2 s.
let adsDefinition: grpc.ServiceDefinition | undefined;
function adsService(): grpc.ServiceDefinition {
  adsDefinition ??= protoLoader.loadSync(
    // endpoint.proto in the same root lets the Any in DiscoveryResponse.resources
    // be encoded from a plain object carrying "@type".
    ["envoy/service/discovery/v3/ads.proto", "envoy/config/endpoint/v3/endpoint.proto"],
    {
      keepCase: true,
      longs: String,
      enums: String,
      defaults: false,
      // Any values read back decode to objects carrying "@type" (a test client sees the assignments).
      json: true,
      includeDirs: ["envoy-api", "xds", "googleapis", "protoc-gen-validate"].map((d) => join(PROTO_ROOT, d)),
    },
  )["envoy.service.discovery.v3.AggregatedDiscoveryService"] as grpc.ServiceDefinition;
  return adsDefinition;
}

/** The fields of envoy.service.discovery.v3.DiscoveryRequest used here (proto field names). */
export interface DiscoveryRequest {
  version_info?: string;
  node?: { id?: string; cluster?: string };
  resource_names?: string[];
  type_url?: string;
  response_nonce?: string;
  error_detail?: { code?: number; message?: string };
}

export interface DiscoveryResponse {
  version_info: string;
  type_url: string;
  nonce: string;
  /** Written as ClusterLoadAssignment objects with "@type" (packed into Any by the encoder); read as Any. */
  resources: object[];
}

type AdsCall = grpc.ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>;

export interface EndpointDiscovery {
  /** For SnapshotServerOptions.services: registered on the aggregator's gRPC server. */
  readonly service: { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation };
  /**
   * Sets the endpoints ("ip:port" literals) of the pools named in `sets`;
   * other pools keep theirs. When a pool's set changes, the version moves and
   * every stream subscribed to that pool's cluster gets the new assignment.
   */
  update(sets: ReadonlyMap<string, readonly string[]>): void;
  /** The version of the current endpoint sets (0 before the first update). */
  version(): number;
  /** Open ADS streams. */
  streams(): number;
  /** Ends every stream with OK (Envoy reconnects to whoever serves next). */
  close(): void;
}

interface Stream {
  id: number;
  call: AdsCall;
  node: string;
  /** Cluster names this Envoy wants; null before its first request. */
  subscribed: Set<string> | null;
  /** Nonce of the latest response sent; requests echoing another one are stale. */
  nonce: string;
  /** Version in that response. */
  sentVersion: string;
  /** Names asked for that no pool answers to, already logged. */
  unknown: Set<string>;
}

export function createEndpointDiscovery(opts: { log: (line: string) => void }): EndpointDiscovery {
  const { log } = opts;
  /** Cluster name -> sorted "ip:port" list. */
  const assignments = new Map<string, string[]>();
  const streams = new Set<Stream>();
  let version = 0;
  let nonces = 0;
  let nextStreamId = 1;

  function loadAssignment(cluster: string, addresses: readonly string[]) {
    return {
      "@type": CLUSTER_LOAD_ASSIGNMENT_TYPE,
      cluster_name: cluster,
      endpoints: [
        {
          lb_endpoints: addresses.map((address) => {
            const hp = parseEndpoint(address)!; // update() only stores literals that parse
            return { endpoint: { address: { socket_address: { address: hp.host, port_value: hp.port } } } };
          }),
        },
      ],
    };
  }

  function send(s: Stream): void {
    const resources: object[] = [];
    for (const name of s.subscribed!) {
      const addresses = assignments.get(name);
      if (addresses) resources.push(loadAssignment(name, addresses));
      else if (!s.unknown.has(name)) {
        // An Envoy rendered from another config: its cluster stays empty and
        // warms up only at its initial_fetch_timeout.
        s.unknown.add(name);
        log(`ads stream ${s.id} (${s.node}) asks for ${name}, which is no pool here`);
      }
    }
    s.nonce = String(++nonces);
    s.sentVersion = String(version);
    s.call.write({ version_info: s.sentVersion, type_url: CLUSTER_LOAD_ASSIGNMENT_TYPE, nonce: s.nonce, resources });
  }

  function onRequest(s: Stream, req: DiscoveryRequest): void {
    const type = req.type_url ?? "";
    if (type !== CLUSTER_LOAD_ASSIGNMENT_TYPE) {
      log(`ads stream ${s.id} (${s.node}): ignoring a request for type ${JSON.stringify(type)}`);
      return;
    }
    const nonce = req.response_nonce ?? "";
    // An empty nonce opens a subscription (first request, or after a reconnect).
    if (nonce !== "" && nonce !== s.nonce) return;
    if (nonce !== "" && req.error_detail) {
      // Sending the same version again would only be rejected again; the next
      // change of the endpoint sets sends a new one.
      log(`ads stream ${s.id} (${s.node}) rejected version ${s.sentVersion}: ${req.error_detail.message ?? "no reason given"}`);
    }
    const names = new Set(req.resource_names ?? []);
    const changed = s.subscribed === null || names.size !== s.subscribed.size || [...names].some((n) => !s.subscribed!.has(n));
    if (!changed) return; // an ACK (or NACK) of what it already has
    s.subscribed = names;
    send(s);
  }

  function stream(call: AdsCall): void {
    const s: Stream = { id: nextStreamId++, call, node: call.getPeer(), subscribed: null, nonce: "", sentVersion: "", unknown: new Set() };
    streams.add(s);
    let gone = false;
    const forget = (why: string) => {
      if (gone) return;
      gone = true;
      streams.delete(s);
      log(`ads stream ${s.id} (${s.node}) ${why} (${streams.size} open)`);
    };
    call.on("data", (req: DiscoveryRequest) => {
      if (s.subscribed === null) {
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

  return {
    service: { definition: adsService(), implementation: { StreamAggregatedResources: stream } },
    update(sets) {
      const changed = new Set<string>();
      for (const [pool, addresses] of sets) {
        for (const a of addresses) {
          const hp = parseEndpoint(a);
          if (!hp || isIP(hp.host) === 0) throw new Error(`pool ${pool}: endpoint ${a} is not an ip:port literal`);
        }
        const cluster = poolClusterName(pool);
        const next = [...new Set(addresses)].sort();
        const prev = assignments.get(cluster);
        if (prev && prev.length === next.length && prev.every((a, i) => a === next[i])) continue;
        assignments.set(cluster, next);
        changed.add(cluster);
      }
      if (changed.size === 0) return;
      version++;
      log(`endpoints version ${version}: ${[...changed].map((c) => `${c}=[${assignments.get(c)!.join(",")}]`).join(" ")}`);
      for (const s of streams) {
        if (s.subscribed && [...changed].some((c) => s.subscribed!.has(c))) send(s);
      }
    },
    version: () => version,
    streams: () => streams.size,
    close() {
      for (const s of streams) s.call.end();
      streams.clear();
    },
  };
}
