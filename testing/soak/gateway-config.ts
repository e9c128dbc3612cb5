// The gateway config the soak runs: two pools with different metrics
// dialects (vLLM with two LoRA adapters, SGLang), admission on with the
// built-in latency profile, every class open to clients so priorities are
// exercised, and each pool's endpoints as they stand at the moment. The soak
// rewrites this file whenever a pod joins or leaves.
import { writeFileSync, renameSync } from "node:fs";
import { stringify } from "yaml";
import type { Engine } from "../../host/config.js";

export interface SoakPool {
  name: string;
  baseModel: string;
  engine: Engine;
  adapters: string[];
  /** Pods at the start. */
  initialPods: number;
}

export const POOLS: readonly SoakPool[] = [
  { name: "llama", baseModel: "llama-3.1-8b", engine: "vllm", adapters: ["sql-lora", "chat-lora"], initialPods: 3 },
  { name: "qwen", baseModel: "qwen3-32b", engine: "sglang", adapters: [], initialPods: 2 },
];

/** Every model name the pools serve, with its share of the good requests. */
export const SERVED_MODELS: ReadonlyArray<{ name: string; weight: number }> = [
  { name: "llama-3.1-8b", weight: 0.35 },
  { name: "sql-lora", weight: 0.15 },
  { name: "chat-lora", weight: 0.1 },
  { name: "qwen3-32b", weight: 0.4 },
];

/** The config text for the aggregator on `aggregatorPort`, pools holding `members` (addresses by pool). */
export function soakConfigYaml(aggregatorPort: number, members: ReadonlyMap<string, readonly string[]>): string {
  return stringify({
    apiVersion: "llm-gateway/v1",
    kind: "InferenceGatewayConfig",
    // Port 0: Envoy's listener and admin are the OS's choice.
    gateway: { host: "127.0.0.1", port: 0, adminPort: 0 },
    // metricsPort 0: the aggregator's own /metrics is off; the soak reads Envoy's.
    aggregator: { host: "127.0.0.1", port: aggregatorPort, metricsPort: 0 },
    traffic: { critical: "any" },
    pools: POOLS.map((p) => ({
      name: p.name,
      baseModel: p.baseModel,
      engine: p.engine,
      adapters: p.adapters,
      endpoints: [...(members.get(p.name) ?? [])],
    })),
  });
}

/** Replaces the file in one step (write aside, rename), as a ConfigMap update does: a reader never sees half a file. */
export function writeConfigFile(path: string, text: string): void {
  const aside = `${path}.next`;
  writeFileSync(aside, text);
  renameSync(aside, path);
}
