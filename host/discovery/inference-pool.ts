// A pool whose pods are a Gateway API Inference Extension InferencePool's
// (inference.networking.k8s.io/v1): the Ready pods its spec.selector
// (matchLabels) matches in its namespace, each an endpoint on its first
// spec.targetPorts number. The object is followed: a changed selector or
// port replaces the pod watch (host/discovery/kubernetes.ts) by one for the
// new values; a deleted or unusable object leaves the pool without pods.
import type { KubeConfig } from "@kubernetes/client-node";
import type { InferencePoolRefConfig } from "../config.js";
import { followObject, type KubeObject } from "../kubernetes/object-watch.js";
import { matchLabelsSelector } from "./label-selector.js";
import { kubernetesSource, loadKubeConfig } from "./kubernetes.js";
import type { DiscoverySink, DiscoverySource } from "./source.js";

export const INFERENCE_POOL = { group: "inference.networking.k8s.io", version: "v1", plural: "inferencepools" } as const;

export interface InferencePoolDiscoveryOptions {
  kubeConfig?: KubeConfig;
  log?: (line: string) => void;
}

/** What the pool's pods are, from the object's spec; a string says why it has none. */
export function podsOf(obj: KubeObject | null): { selector: string; port: number } | string {
  if (!obj) return "the InferencePool does not exist";
  const spec = (obj.spec ?? {}) as { selector?: { matchLabels?: unknown }; targetPorts?: Array<{ number?: unknown }> };
  const labels = spec.selector?.matchLabels;
  if (!labels || typeof labels !== "object" || Object.keys(labels).length === 0) return "spec.selector.matchLabels is empty";
  const port = spec.targetPorts?.[0]?.number;
  if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) return "spec.targetPorts[0].number is not a port";
  return { selector: matchLabelsSelector(labels as Record<string, string>), port };
}

export function inferencePoolSource(pool: { name: string; inferencePool: InferencePoolRefConfig }, opts: InferencePoolDiscoveryOptions = {}): DiscoverySource {
  const log = opts.log ?? ((line: string) => console.log(`[discovery] ${line}`));
  const stop = new AbortController();
  const { namespace, name } = pool.inferencePool;
  const what = `pool ${pool.name}: InferencePool ${namespace}/${name}`;
  let pods: { key: string; source: DiscoverySource } | null = null;

  return {
    async start(sink: DiscoverySink) {
      const kubeConfig = opts.kubeConfig ?? (await loadKubeConfig(pool.inferencePool.kubeconfig));
      let answered: () => void = () => {};
      const first = new Promise<void>((resolve) => (answered = resolve));
      /** Whether the sink has heard of the pool at all (the pod watch reports for itself once started). */
      let reported = false;
      const seen = (obj: KubeObject | null) => {
        reported = true;
        const want = podsOf(obj);
        const key = typeof want === "string" ? "" : `${want.selector} ${want.port}`;
        if (pods && pods.key === key) return answered();
        pods?.source.close();
        pods = null;
        if (typeof want === "string") {
          log(`${what}: no pods (${want})`);
          sink.event(pool.name, "error", want);
          sink.targets(pool.name, []);
          return answered();
        }
        log(`${what}: pods ${want.selector} on port ${want.port}`);
        const source = kubernetesSource({ name: pool.name, kubernetes: { namespace, selector: want.selector, port: want.port } }, { kubeConfig, log });
        pods = { key, source };
        void source.start(sink).then(answered, answered);
      };
      void followObject({
        kubeConfig,
        ref: { ...INFERENCE_POOL, namespace, name },
        seen,
        failed: (reason) => {
          sink.event(pool.name, "error", reason);
          // A pool whose object cannot be read at all has no pods yet: say so, so start() can finish.
          if (!reported) sink.targets(pool.name, []);
          reported = true;
          answered();
        },
        signal: stop.signal,
      });
      await first;
    },
    notAnswering(poolName, address) {
      pods?.source.notAnswering?.(poolName, address);
    },
    close() {
      stop.abort();
      pods?.source.close();
    },
  };
}
