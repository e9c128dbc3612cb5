// Helpers for the traffic-management end-to-end tests: a fleet
// stack whose config also has profiles, models and traffic sections; a
// header-recording proxy in front of a fake pod; JWTs signed by a local
// JWKS. (Connections pinned to Envoy's workers: ./connections.ts.)
import { generateKeyPairSync, sign } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { parseGatewayConfig } from "../../host/config.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { fleetBatchSlots, startStack, type FleetPool, type Stack } from "../../testing/launcher/stack.js";
import type { Conn } from "./connections.js";
import { waitFor } from "./stack.js";

// ---------------------------------------------------------------------------
// The stack.

export interface TrafficStack extends Stack {
  fleet: Fleet;
  /** Headers of every inference request each proxied pod received (pod name -> list). */
  seen: Map<string, http.IncomingHttpHeaders[]>;
  /** The address the gateway knows a pod by (its proxy's, when proxied). */
  addressOf(pod: string): string;
  /** The pod behind a gateway address. */
  podAt(address: string): string;
}

export interface TrafficOptions {
  /** Merged into the gateway block (e.g. jwt). */
  gateway?: Record<string, unknown>;
  /** Merged into the aggregator block. */
  aggregator?: Record<string, unknown>;
  /** Top-level profiles, models and traffic sections. */
  profiles?: Record<string, unknown>;
  models?: unknown[];
  traffic?: Record<string, unknown>;
  /** Put a header-recording proxy in front of every pod. */
  recordHeaders?: boolean;
}

/**
 * Fake pods on loopback, the aggregator and Envoy with two workers, every
 * port 0: startFleetStack, with the traffic sections of the config too.
 */
export async function startTrafficStack(pools: FleetPool[], opts: TrafficOptions = {}): Promise<TrafficStack> {
  const fleet = await startFleet(
    pools.flatMap((p) =>
      p.pods.map((pod) => ({ ...pod, model: p.baseModel, adapters: p.adapters ?? [], metricsFormat: p.engine ?? "vllm" })),
    ),
  );
  const proxies: RecordingProxy[] = [];
  const seen = new Map<string, http.IncomingHttpHeaders[]>();
  const byPod = new Map<string, string>();
  try {
    for (const pod of fleet.pods) {
      if (opts.recordHeaders) {
        const list: http.IncomingHttpHeaders[] = [];
        seen.set(pod.name, list);
        const proxy = await startRecordingProxy(pod.port, list);
        proxies.push(proxy);
        byPod.set(pod.name, proxy.address);
      } else {
        byPod.set(pod.name, pod.address);
      }
    }
    const config = parseGatewayConfig(
      stringify({
        gateway: { host: "127.0.0.1", port: 0, adminPort: 0, ...opts.gateway },
        aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0, scrapeIntervalMs: 50, staleAfterMs: 1000, ...opts.aggregator },
        pools: pools.map((p) => ({
          name: p.name,
          baseModel: p.baseModel,
          engine: p.engine ?? "vllm",
          adapters: p.adapters ?? [],
          ...fleetBatchSlots(p),
          endpoints: p.pods.map((pod) => {
            const address = byPod.get(pod.name)!;
            return p.statedCapacity === undefined ? address : { address, capacity: p.statedCapacity };
          }),
        })),
        ...(opts.profiles ? { profiles: opts.profiles } : {}),
        ...(opts.models ? { models: opts.models } : {}),
        ...(opts.traffic ? { traffic: opts.traffic } : {}),
      }),
      "traffic stack",
    );
    const stack = await startStack(config, { metricsPort: false, concurrency: 2 });
    const podAt = new Map([...byPod].map(([pod, address]) => [address, pod]));
    return {
      ...stack,
      fleet,
      seen,
      addressOf: (pod) => byPod.get(pod) ?? fleet.pod(pod).address,
      podAt: (address) => podAt.get(address) ?? "",
      close: async () => {
        await stack.close();
        for (const p of proxies) await p.close();
        await fleet.close();
      },
    };
  } catch (err) {
    for (const p of proxies) await p.close();
    await fleet.close();
    throw err;
  }
}

interface RecordingProxy {
  address: string;
  close(): Promise<void>;
}

/** Forwards everything to a pod on loopback; records the headers of each POST (the inference requests). */
async function startRecordingProxy(port: number, seen: http.IncomingHttpHeaders[]): Promise<RecordingProxy> {
  const agent = new http.Agent({ keepAlive: true });
  const server = http.createServer((req, res) => {
    if (req.method === "POST") seen.push({ ...req.headers });
    const up = http.request(
      { host: "127.0.0.1", port, method: req.method, path: req.url, headers: req.headers, agent },
      (upRes) => {
        res.writeHead(upRes.statusCode ?? 502, upRes.headers);
        upRes.pipe(res);
      },
    );
    up.on("error", () => res.destroy());
    res.on("close", () => {
      if (!res.writableFinished) up.destroy();
    });
    req.pipe(up);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
        agent.destroy();
      }),
  };
}

// ---------------------------------------------------------------------------
// JWTs: a key pair, its JWKS in a temp file, tokens with any claims.

export const ISSUER = "https://auth.traffic.test";

export interface Jwt {
  /** For the gateway block: { issuer, audiences, jwksFile }. */
  config: { issuer: string; audiences: string[]; jwksFile: string };
  token(claims?: Record<string, unknown>): string;
  remove(): void;
}

export function makeJwt(): Jwt {
  const keys = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const dir = mkdtempSync(join(tmpdir(), "gw-traffic-jwt-"));
  const jwksFile = join(dir, "jwks.json");
  writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...keys.publicKey.export({ format: "jwk" }), kid: "k1", alg: "RS256", use: "sig" }] }));
  const b64 = (v: object | Buffer) => (Buffer.isBuffer(v) ? v : Buffer.from(JSON.stringify(v))).toString("base64url");
  return {
    config: { issuer: ISSUER, audiences: [], jwksFile },
    token(claims = {}) {
      const head = `${b64({ alg: "RS256", typ: "JWT", kid: "k1" })}.${b64({ iss: ISSUER, exp: Math.floor(Date.now() / 1000) + 600, ...claims })}`;
      return `${head}.${b64(sign("sha256", Buffer.from(head), keys.privateKey))}`;
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** Waits until the aggregator's view satisfies `check`, then until every idle connection's worker routes on it. */
export async function waitForView(
  stack: Stack,
  conns: Conn[],
  what: string,
  check: (endpoints: ReturnType<Stack["aggregator"]["current"]>["pools"][number]["endpoints"]) => boolean,
  timeoutMs = 10_000,
): Promise<void> {
  await waitFor(what, () => check(stack.aggregator.current().pools.flatMap((p) => p.endpoints)), timeoutMs);
  const version = Number(stack.aggregator.current().version);
  const idle = conns.filter((c) => !c.busy);
  const workers = new Set(idle.map((c) => c.worker));
  if (workers.size < 2) throw new Error("waitForView needs an idle connection on each worker");
  await waitFor(`both workers to install snapshot ${version}`, async () => {
    for (const w of workers) {
      const c = idle.find((x) => x.worker === w)!;
      if ((await c.get("/health")).json.snapshot_version < version) return false;
    }
    return true;
  });
}

/** The gateway's own counters (admin /stats, wasmcustom.llm_gateway.*), names without the prefix. */
export async function gatewayStats(stack: Stack): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(await stack.envoy.stats("^wasmcustom\\.llm_gateway\\."))) {
    out[k.slice("wasmcustom.".length)] = v;
  }
  return out;
}

/** A name as the model routes' stat prefixes spell it (host/envoy/config.ts): anything but [A-Za-z0-9_-] becomes "_". */
export const statSegment = (s: string) => s.replace(/[^A-Za-z0-9_-]/g, "_");
