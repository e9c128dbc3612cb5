// One Wasm VM: an instance of the plugin module with its own memory and
// globals, as Envoy runs one per worker thread (plus one on the main thread
// for singleton services). Context ids are allocated per VM from 1, the VM's
// own context being 0 (proxy-wasm-cpp-host WasmBase::allocContextId).
import { LOG_LEVEL_NAMES, type LogLevelName } from "./abi.js";
import { RootContext, type CallContext, type PluginSpec } from "./contexts.js";
import { hostCalls, UnsupportedHostCall, type GrpcStream, type HostCallSite } from "./hostcalls.js";
import { GuestMemory } from "./memory.js";
import { VmMetrics, type MetricStore } from "./metrics.js";
import type { SharedData } from "./shared-data.js";
import { HttpStream, type Dispatcher } from "./stream.js";

/** What every VM of one emulated Envoy process shares. */
export interface ProcessServices {
  nowNs(): bigint;
  readonly sharedData: SharedData;
  readonly metrics: MetricStore;
}

export interface VmOptions {
  /** Envoy's vm_config.vm_id: VMs with the same id share shared data. */
  vmId: string;
  /** vm_config.configuration, handed to proxy_on_vm_start. */
  vmConfiguration?: string;
  /** Names the VM in errors, e.g. "worker 1". */
  label?: string;
}

export interface LogEntry {
  level: LogLevelName;
  message: string;
  contextId: number;
}

/** The configuration was refused (proxy_on_vm_start or proxy_on_configure returned false): Envoy rejects the plugin. */
export class PluginRejected extends Error {}

type Export = (...args: (number | bigint)[]) => number | bigint | undefined;

export class WasmVm implements Dispatcher {
  readonly label: string;
  readonly vmId: string;
  readonly vmConfiguration: Uint8Array;
  readonly logs: LogEntry[] = [];
  readonly grpcStreams: GrpcStream[] = [];
  /** Imports the module declares that the emulator does not implement (calling one throws). */
  readonly unimplementedImports: string[] = [];
  private readonly calls = new Map<string, number>();
  private readonly roots: RootContext[] = [];
  private readonly vmContext: RootContext;
  private readonly exports: Record<string, Export>;
  private readonly guest: GuestMemory;
  private readonly metrics: VmMetrics;
  private nextContextId = 1;
  private nextGrpcToken = 1;
  private current: CallContext | null = null;
  /** Streams by context id, until deleted: what proxy_set_effective_context may name. */
  private readonly streams = new Map<number, HttpStream>();
  private failure: string | null = null;

  constructor(
    module: WebAssembly.Module,
    private readonly process: ProcessServices,
    options: VmOptions,
  ) {
    this.vmId = options.vmId;
    this.label = options.label ?? `vm ${options.vmId}`;
    this.vmConfiguration = Buffer.from(options.vmConfiguration ?? "");
    this.vmContext = new RootContext(0, null, this.vmId);
    this.metrics = new VmMetrics(process.metrics);
    const instance = new WebAssembly.Instance(module, { env: this.importsFor(module) });
    this.exports = instance.exports as unknown as Record<string, Export>;
    const memory = instance.exports.memory;
    if (!(memory instanceof WebAssembly.Memory)) throw new Error(`${this.label}: the module exports no memory`);
    // Envoy's host prefers `malloc`, then `proxy_on_memory_allocate`.
    const allocate = this.exports.malloc ?? this.exports.proxy_on_memory_allocate;
    if (!allocate) throw new Error(`${this.label}: the module exports no malloc or proxy_on_memory_allocate`);
    this.guest = new GuestMemory(memory, (size) => Number(allocate(size)));
  }

  /** Creates the plugin's root context and configures it, as Envoy starts a plugin on a VM. */
  startPlugin(plugin: PluginSpec): RootContext {
    const root = new RootContext(this.nextContextId++, plugin, this.vmId);
    this.roots.push(root);
    root.configurationVisible = true;
    this.dispatch("proxy_on_context_create", root, [root.id, 0]);
    root.configurationVisible = false;
    if (this.dispatch("proxy_on_vm_start", root, [root.id, this.vmConfiguration.length]) === 0) {
      throw new PluginRejected(`${this.label}: proxy_on_vm_start refused root_id ${plugin.rootId}`);
    }
    root.configurationVisible = true;
    const configured = this.dispatch("proxy_on_configure", root, [root.id, Buffer.byteLength(plugin.configuration)]);
    root.configurationVisible = false;
    if (configured === 0) throw new PluginRejected(`${this.label}: proxy_on_configure refused root_id ${plugin.rootId}`);
    return root;
  }

  /** A new HTTP stream under `root` (proxy_on_context_create with the root as parent). */
  createStream(root: RootContext): HttpStream {
    const stream = new HttpStream(this, this.nextContextId++, root);
    this.streams.set(stream.id, stream);
    this.dispatch("proxy_on_context_create", stream, [stream.id, root.id]);
    return stream;
  }

  /** Fires proxy_on_tick on every root context that set a tick period. */
  tick(): void {
    for (const root of this.roots) if (root.tickPeriodMs > 0) this.dispatch("proxy_on_tick", root, [root.id]);
  }

  /** Delivers a message on an open gRPC stream (an empty one is a valid message). */
  grpcReceive(token: number, message: Uint8Array): void {
    const stream = this.openGrpcStreamByToken(token);
    stream.root.grpcMessage = message;
    try {
      this.dispatch("proxy_on_grpc_receive", stream.root, [stream.root.id, token, message.length]);
    } finally {
      stream.root.grpcMessage = null;
    }
  }

  /** The remote end closes a gRPC stream with a gRPC status. */
  grpcClose(token: number, grpcStatus: number): void {
    const stream = this.openGrpcStreamByToken(token);
    stream.state = "closed";
    this.dispatch("proxy_on_grpc_close", stream.root, [stream.root.id, token, grpcStatus]);
  }

  /** Host calls made since the last reset, by import name. */
  hostCalls(): Record<string, number> {
    return Object.fromEntries([...this.calls].sort(([a], [b]) => a.localeCompare(b)));
  }

  hostCallTotal(): number {
    return [...this.calls.values()].reduce((a, b) => a + b, 0);
  }

  resetHostCalls(): void {
    this.calls.clear();
  }

  /** An exported global's value, e.g. the count of an instrumented module (instruction-counter.ts); undefined if none. */
  exportedGlobal(name: string): number | bigint | undefined {
    const g: unknown = this.exports[name];
    return g instanceof WebAssembly.Global ? (g.value as number | bigint) : undefined;
  }

  /** Runs an exported callback (or any export) for `ctx`; undefined if the module does not export it. A trap fails the VM. */
  dispatch(name: string, ctx: CallContext, args: number[]): number | undefined {
    if (this.failure !== null) throw new Error(`${this.label} failed earlier (${this.failure}); Envoy would not call ${name}`);
    const fn = this.exports[name];
    if (fn === undefined) return undefined;
    const outer = this.current;
    this.current = ctx;
    try {
      const result = fn(...args);
      return result === undefined ? undefined : Number(result);
    } catch (e) {
      if (!(e instanceof WebAssembly.RuntimeError)) throw e;
      // A trap fails the VM, as in Envoy; keep the plugin's own last words.
      const critical = this.logs.filter((l) => l.level === "critical").at(-1)?.message;
      this.failure = `${name} trapped: ${e.message}${critical ? `; ${critical}` : ""}`;
      throw new Error(`${this.label}: ${this.failure}`, { cause: e });
    } finally {
      this.current = outer;
    }
  }

  private importsFor(module: WebAssembly.Module): Record<string, (...args: never[]) => number> {
    const site = this.callSite();
    const implemented: Record<string, (...args: never[]) => number> = hostCalls(site);
    const imports: Record<string, (...args: never[]) => number> = {};
    for (const imp of WebAssembly.Module.imports(module)) {
      if (imp.module !== "env" || imp.kind !== "function") {
        throw new Error(`${this.label}: import ${imp.module}.${imp.name} (${imp.kind}) is not a proxy-wasm host function`);
      }
      const fn = implemented[imp.name];
      if (fn === undefined) this.unimplementedImports.push(imp.name);
      imports[imp.name] = (...args: never[]) => {
        this.calls.set(imp.name, (this.calls.get(imp.name) ?? 0) + 1);
        if (fn === undefined) throw new UnsupportedHostCall(`proxy-wasm emulator: ${imp.name} is not implemented (${this.label})`);
        return fn(...args);
      };
    }
    return imports;
  }

  private callSite(): HostCallSite {
    const vm = this;
    return {
      label: this.label,
      vmId: this.vmId,
      vmConfiguration: this.vmConfiguration,
      get memory() {
        if (vm.guest === undefined) throw new Error(`${vm.label}: a host call during module start-up cannot reach memory yet`);
        return vm.guest;
      },
      sharedData: this.process.sharedData,
      metrics: this.metrics,
      nowNs: () => this.process.nowNs(),
      // Code running outside any callback (the module's start function) runs in the VM's context.
      context: () => this.current ?? this.vmContext,
      // Envoy switches the running callback's context until it returns (Context::setEffectiveContext).
      setEffectiveContext: (id) => {
        const ctx = this.streams.get(id) ?? this.roots.find((r) => r.id === id);
        if (ctx === undefined || (ctx instanceof HttpStream && ctx.deleted)) return false;
        this.current = ctx;
        return true;
      },
      log: (level, message) => {
        this.logs.push({ level: LOG_LEVEL_NAMES[level], message, contextId: (this.current ?? this.vmContext).id });
      },
      openGrpcStream: (stream) => {
        const token = this.nextGrpcToken++;
        this.grpcStreams.push({ ...stream, token, sent: [], localEnded: false, state: "open" });
        return token;
      },
      grpcStream: (token) => this.grpcStreams.find((s) => s.token === token),
    };
  }

  private openGrpcStreamByToken(token: number): GrpcStream {
    const stream = this.grpcStreams.find((s) => s.token === token && s.state === "open");
    if (!stream) throw new Error(`${this.label}: no open gRPC stream ${token}`);
    return stream;
  }
}
