// build/filter.wasm hosted as Envoy hosts it, on the proxy-wasm emulator: the
// singleton link (root_id llm_gateway_link) on the main thread's VM and the
// HTTP filter (root_id llm_gateway) on one VM per worker, all with the same
// vm_id so they share shared data, configured from the rendered Envoy config.
// Snapshots reach the workers the way they do in Envoy: the test plays the
// aggregator on the link's gRPC stream, the link publishes into shared data,
// and each worker picks them up on its tick.
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { renderEnvoyConfig, type EnvoyConfigParams } from "../../host/envoy/index.js";
import { filterWasmPath } from "../../host/paths.js";
import { encodeSnapshot, type SnapshotMsg } from "../../host/proto.js";
import { ProxyWasmHost, type GrpcStream, type HttpStream, type PluginSpec, type RequestSpec, type RootContext, type WasmVm } from "../../testing/proxy-wasm-emulator/index.js";

export interface WasmPlugin {
  plugin: PluginSpec;
  vmId: string;
}

export type GatewaySettings = Pick<EnvoyConfigParams, "maxBodyBytes" | "staleView" | "passiveHealth" | "accessLog">;

export interface GatewayRoot {
  vm: WasmVm;
  root: RootContext;
  /** The emulated clock (ms) when the root was configured. */
  configuredAtMs: number;
}

/** The link's and the filter's plugin entries exactly as the rendered Envoy bootstrap declares them. */
export function renderedPlugins(settings: GatewaySettings): { link: WasmPlugin; filter: WasmPlugin } {
  const doc = parseYaml(renderEnvoyConfig({
    gatewayHost: "127.0.0.1",
    gatewayPort: 0,
    adminPort: 0,
    aggregatorHost: "127.0.0.1",
    aggregatorPort: 50051,
    wasmPath: filterWasmPath,
    pools: ["p"],
    ...settings,
  }));
  const link = doc.bootstrap_extensions.find((e: { name: string }) => e.name === "envoy.bootstrap.wasm").typed_config.config;
  const hcm = doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
  const filter = hcm.http_filters.find((f: { name: string }) => f.name === "envoy.filters.http.wasm").typed_config.config;
  return { link: wasmPlugin(link), filter: wasmPlugin(filter) };
}

function wasmPlugin(config: { name: string; root_id: string; vm_config: { vm_id: string; configuration?: unknown }; configuration: { value: string } }): WasmPlugin {
  if (config.vm_config.configuration !== undefined) throw new Error("the emulated gateway does not pass a vm configuration");
  return { plugin: { name: config.name, rootId: config.root_id, configuration: config.configuration.value }, vmId: config.vm_config.vm_id };
}

let filterModule: WebAssembly.Module | undefined;

/** build/filter.wasm, compiled once per test file. */
export function filterWasmModule(): WebAssembly.Module {
  filterModule ??= new WebAssembly.Module(readFileSync(filterWasmPath));
  return filterModule;
}

export class EmulatedGateway {
  readonly host: ProxyWasmHost;
  readonly link: GatewayRoot;
  readonly workers: GatewayRoot[];

  /** Starts the link, then `workers` filter VMs, at `startMs` on the emulated clock. */
  /** `module`: another build of the filter (e.g. counted-filter.ts); build/filter.wasm by default. */
  constructor(options: { startMs: number; workers?: number; settings?: Partial<GatewaySettings>; module?: WebAssembly.Module }) {
    const plugins = renderedPlugins({ maxBodyBytes: 4 * 1024 * 1024, ...options.settings });
    this.host = new ProxyWasmHost(options.startMs);
    const start = (p: WasmPlugin, label: string): GatewayRoot => {
      const vm = this.host.createVm(options.module ?? filterWasmModule(), { vmId: p.vmId, label });
      return { vm, root: vm.startPlugin(p.plugin), configuredAtMs: this.host.nowMs() };
    };
    this.link = start(plugins.link, "main thread");
    this.workers = Array.from({ length: options.workers ?? 1 }, (_, i) => start(plugins.filter, `worker ${i}`));
  }

  /** The aggregator pushes a snapshot to the link (the bytes Envoy's gRPC client would deliver). */
  publish(snapshot: SnapshotMsg | Uint8Array): void {
    const bytes = snapshot instanceof Uint8Array ? snapshot : encodeSnapshot(snapshot);
    this.link.vm.grpcReceive(this.aggregatorStream().token, bytes);
  }

  /** The aggregator's heartbeat: an empty message. */
  heartbeat(): void {
    this.link.vm.grpcReceive(this.aggregatorStream().token, new Uint8Array(0));
  }

  /** The link's open stream to the aggregator. */
  aggregatorStream(): GrpcStream {
    const open = this.link.vm.grpcStreams.filter((s) => s.state === "open");
    if (open.length !== 1) throw new Error(`the link has ${open.length} open aggregator streams, expected 1`);
    return open[0];
  }

  /** A new stream on worker `worker`, sent as far as the filter lets it go. */
  request(spec: RequestSpec, worker = 0): HttpStream {
    const w = this.workers[worker];
    return w.vm.createStream(w.root).send(spec);
  }
}
