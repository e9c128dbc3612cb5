// A local fake fleet for a gateway config (config/local-fleet.yaml beside
// config/local.yaml): which fake pods to start, each in a pool of that
// config, on a port its endpoints name. Not part of the gateway's own config:
// the product never starts pods.
import { readFileSync } from "node:fs";
import * as z from "zod";
import { ENGINES, parseEndpoint, type Engine, type GatewayConfig } from "../../host/config.js";
import { msg, validateYaml } from "../../host/validation.js";
import type { PodSpec } from "./fleet.js";

export interface LocalPod {
  name: string;
  /** The gateway config's pool this pod serves. */
  pool: string;
  /** On 127.0.0.1 (or the fleet's host). */
  port: number;
  /** 0.5 = half as fast (an older GPU). */
  speed: number;
  /** Whose metric names it exports; its pool's engine unless given. */
  engine: Engine;
  /** "fake" (default): a fake pod; "llama-server": a real llama.cpp server (testing/llamacpp/), engine llamacpp. */
  server: LocalServer;
}

export const LOCAL_SERVERS = ["fake", "llama-server"] as const;
export type LocalServer = (typeof LOCAL_SERVERS)[number];

const NAME = /^[A-Za-z0-9][A-Za-z0-9._:\/-]{0,255}$/;
const name = z.string({ error: msg("expected a name") }).regex(NAME, { error: "expected a name" });

const fleetSchema = z.strictObject({
  pods: z.array(
    z.strictObject({
      name,
      pool: name,
      port: z.number({ error: msg("expected a port number") }).int({ error: "expected a port number" }).min(1).max(65535),
      speed: z.number({ error: msg("expected a number > 0") }).positive({ error: "expected a number > 0" }).default(1),
      engine: z.enum(ENGINES, { error: msg(`expected one of ${ENGINES.join(", ")}`) }).optional(),
      server: z.enum(LOCAL_SERVERS, { error: msg(`expected one of ${LOCAL_SERVERS.join(", ")}`) }).default("fake"),
    }),
    { error: msg("expected a list of pods") },
  ),
});

export class FleetFileError extends Error {
  constructor(source: string, readonly issues: string[]) {
    super(`${source}: invalid fake fleet:\n  ${issues.join("\n  ")}`);
    this.name = "FleetFileError";
  }
}

/** Pods with unique names and ports, each in a pool of `config` on a port the pool reaches. */
export function parseLocalFleet(text: string, config: GatewayConfig, source = "<fleet>"): LocalPod[] {
  const poolIndex = new Map(config.pools.map((p, i) => [p.name, i]));
  const result = validateYaml(fleetSchema, text, (raw) => {
    const issues: string[] = [];
    const names = new Map<string, number>();
    const ports = new Map<number, number>();
    raw.pods.forEach((pod, k) => {
      const path = `pods[${k}]`;
      if (names.has(pod.name)) issues.push(`${path}.name: duplicate pod name "${pod.name}" (also pods[${names.get(pod.name)}])`);
      else names.set(pod.name, k);
      // Local pods all listen on one host, so ports must differ.
      if (ports.has(pod.port)) issues.push(`${path}.port: port ${pod.port} is already used by pods[${ports.get(pod.port)}]`);
      else ports.set(pod.port, k);
      const i = poolIndex.get(pod.pool);
      if (i === undefined) {
        issues.push(`${path}.pool: unknown pool "${pod.pool}" (pools: ${[...poolIndex.keys()].join(", ")})`);
        return;
      }
      // A pod the gateway never routes to is almost certainly a typo.
      const pool = config.pools[i];
      if (pod.server === "llama-server" && pool.engine !== "llamacpp") {
        issues.push(`${path}.server: a llama-server pod needs its pool "${pod.pool}" to read engine llamacpp (pools[${i}].engine is ${pool.engine})`);
      }
      if (pool.kubernetes && pool.kubernetes.port !== pod.port) {
        issues.push(`${path}.port: pool "${pod.pool}" reaches its pods on port ${pool.kubernetes.port} (pools[${i}].kubernetes.port), not ${pod.port}`);
      } else if (!pool.kubernetes && !pool.endpoints.some((ep) => parseEndpoint(ep)?.port === pod.port)) {
        issues.push(`${path}.port: no endpoint of pool "${pod.pool}" (pools[${i}].endpoints) uses port ${pod.port}`);
      }
    });
    return issues;
  });
  if ("issues" in result) throw new FleetFileError(source, result.issues);
  return result.data.pods.map((pod) => ({ ...pod, engine: pod.engine ?? config.pools[poolIndex.get(pod.pool)!].engine }));
}

export function loadLocalFleet(path: string, config: GatewayConfig): LocalPod[] {
  return parseLocalFleet(readFileSync(path, "utf8"), config, path);
}

/** Fake-pod specs: each pod serves its pool's base model and adapters, in its pool's metrics format. */
/** The fake pods among `pods`, as the fake fleet starts them. */
export function localFleetSpecs(pods: readonly LocalPod[], config: GatewayConfig): PodSpec[] {
  return pods.filter((pod) => pod.server === "fake").map((pod) => {
    const pool = config.pools.find((p) => p.name === pod.pool)!;
    return {
      name: pod.name,
      port: pod.port,
      model: pool.baseModel,
      adapters: pool.adapters,
      metricsFormat: pod.engine,
      engineConfig: { speed: pod.speed },
    };
  });
}
