// An emulated Envoy process hosting proxy-wasm VMs: one clock the test
// controls, one shared-data store and one stats store for all its VMs.
import { MetricStore } from "./metrics.js";
import { SharedData } from "./shared-data.js";
import { WasmVm, type ProcessServices, type VmOptions } from "./vm.js";

export class ProxyWasmHost implements ProcessServices {
  readonly sharedData = new SharedData();
  readonly metrics = new MetricStore();
  readonly vms: WasmVm[] = [];
  private clockNs: bigint;

  /** The clock starts at `startMs` (Unix milliseconds) and moves only when told to. */
  constructor(startMs: number) {
    this.clockNs = BigInt(startMs) * 1_000_000n;
  }

  nowNs(): bigint {
    return this.clockNs;
  }

  nowMs(): number {
    return Number(this.clockNs / 1_000_000n);
  }

  advance(ms: number): void {
    if (ms < 0) throw new Error("the emulated clock only moves forward; use setTime to step it back");
    this.clockNs += BigInt(ms) * 1_000_000n;
  }

  setTime(ms: number): void {
    this.clockNs = BigInt(ms) * 1_000_000n;
  }

  createVm(module: WebAssembly.Module, options: VmOptions): WasmVm {
    const vm = new WasmVm(module, this, options);
    this.vms.push(vm);
    return vm;
  }

  /** Fires every VM's timers once, in VM creation order. */
  tick(): void {
    for (const vm of this.vms) vm.tick();
  }

  /** A counter's total or a gauge's value, summed over every VM that defined it; 0 if none did. */
  metric(name: string): number {
    return Number(this.metrics.get(name)?.value ?? 0n);
  }

  /** A metric summed over all its labels: every stat named `metric` or `metric;<tag>=<value>...` (assembly/gateway/stat-names.ts). */
  metricTotal(metric: string): number {
    return this.metrics.names().filter((n) => n === metric || n.startsWith(`${metric};`)).reduce((sum, n) => sum + this.metric(n), 0);
  }

  /** Every value a histogram recorded, in order. */
  samples(name: string): number[] {
    return (this.metrics.get(name)?.samples ?? []).map(Number);
  }
}
