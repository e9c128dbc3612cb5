// The fake pods a gateway config's localFleet block describes: each pod
// serves its pool's base model and adapters, in its pool's metrics format.
import type { GatewayConfig } from "../../host/config.js";
import type { PodSpec } from "./fleet.js";

/** Fake-pod specs for a config's localFleet block. */
export function localFleetSpecs(config: GatewayConfig): PodSpec[] {
  return (config.localFleet?.pods ?? []).map((pod) => {
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
