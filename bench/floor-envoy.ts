// Envoy with the bench's floor filter (assembly/floor-filter.ts) where the
// gateway's filter was: the no-filter baseline (baseline-envoy.ts), plus the
// gateway's own Wasm HTTP filter entry at its own place in the chain, with
// only its module, root and plugin configuration swapped. Listener, routes,
// clusters and buffer limits are the baseline's, so against the baseline
// only the filter differs, and against the gateway only what the filter does.
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { projectRoot } from "../host/paths.js";
import { baselineEnvoyConfig, connectionManagers, type BaselinePool, type Bootstrap, type EnvoyLbPolicy } from "./baseline-envoy.js";

export const floorWasmPath = join(projectRoot, "build", "floor-filter.wasm");
/** What the floor filter sets on every request it lets through. */
export const FLOOR_HEADER = "x-bench-floor";
const FLOOR_ROOT_ID = "bench_floor";
const FLOOR_VM_ID = "bench-floor";
const WASM_HTTP_FILTER = "envoy.filters.http.wasm";

/** Compiles assembly/floor-filter.ts with the product filter's runtime options (asconfig.json's "floor" target). */
export function buildFloorFilter(): string {
  execFileSync(process.execPath, [join(projectRoot, "node_modules", "assemblyscript", "bin", "asc.js"), "assembly/floor-filter.ts", "--target", "floor"], {
    cwd: projectRoot,
    stdio: "pipe",
  });
  return floorWasmPath;
}

export function floorEnvoyConfig(gatewayYaml: string, pools: BaselinePool[], lbPolicy: EnvoyLbPolicy, wasmPath = floorWasmPath): string {
  const gateway = connectionManagers(parse(gatewayYaml) as Bootstrap).find((h) => h?.http_filters?.some((f) => f.name === WASM_HTTP_FILTER));
  const index = gateway?.http_filters?.findIndex((f) => f.name === WASM_HTTP_FILTER) ?? -1;
  if (!gateway?.http_filters || index < 0) throw new Error(`floor Envoy: the rendered gateway config has no ${WASM_HTTP_FILTER} HTTP filter`);
  const entry = gateway.http_filters[index] as { name: string; typed_config?: { config?: Record<string, unknown> } };
  const config = entry.typed_config?.config as { vm_config?: Record<string, unknown> } | undefined;
  if (!config?.vm_config) throw new Error("floor Envoy: the gateway's Wasm filter has no vm_config");

  const floorFilter = {
    ...entry,
    typed_config: {
      ...entry.typed_config,
      config: {
        ...config,
        name: FLOOR_ROOT_ID,
        root_id: FLOOR_ROOT_ID,
        vm_config: { ...config.vm_config, vm_id: FLOOR_VM_ID, code: { local: { filename: wasmPath } } },
        configuration: { "@type": "type.googleapis.com/google.protobuf.StringValue", value: "" },
      },
    },
  };
  const cfg = parse(baselineEnvoyConfig(gatewayYaml, pools, lbPolicy)) as Bootstrap;
  const hcm = connectionManagers(cfg).find((h) => h?.http_filters?.length === gateway.http_filters!.length - 1);
  if (!hcm?.http_filters) throw new Error("floor Envoy: the baseline config lost the gateway's HTTP connection manager");
  hcm.http_filters.splice(index, 0, floorFilter);
  return stringify(cfg);
}
