// Memory over the run, sampled every few seconds: Envoy's and the
// aggregator's resident set (VmRSS in /proc/<pid>/status, each process its
// own) and the filter's Wasm linear memory (the sum over its VMs, from the
// filter's own gauge: Envoy's stats give no Wasm memory figure).
import { readFileSync } from "node:fs";
import type { EnvoyProcess } from "../launcher/envoy-process.js";
import { PeriodicSampler } from "../launcher/periodic-sampler.js";

export const WASM_MEMORY_STAT = "wasmcustom.llm_gateway.wasm_memory_bytes";
/** Rebuilt VMs add their memory to the gauge again (memory-gauge.ts): the report shows this beside it. */
export const VM_RELOAD_STAT = "wasm.llm_gateway.vm_reload";

export interface MemorySample {
  /** Since the start of the load. */
  tMs: number;
  envoyRssBytes: number | null;
  aggregatorRssBytes: number | null;
  wasmBytes: number | null;
  vmReloads: number | null;
}

/** The process's resident set in bytes; null when it is gone. */
export function rssBytes(pid: number | null): number | null {
  if (pid === null) return null;
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return null;
  }
  const kb = /^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1];
  return kb === undefined ? null : Number(kb) * 1024;
}

export class MemorySampler extends PeriodicSampler<MemorySample> {
  constructor(
    private readonly envoy: EnvoyProcess,
    private readonly aggregatorPid: () => number | null,
    private readonly clock: () => number,
    intervalMs: number,
  ) {
    super(intervalMs);
  }

  async sample(): Promise<MemorySample> {
    const stats = await this.envoy
      .stats(`^(${WASM_MEMORY_STAT.replace(/\./g, "\\.")}|${VM_RELOAD_STAT.replace(/\./g, "\\.")})$`)
      .catch((): Record<string, number> => ({}));
    const s: MemorySample = {
      tMs: this.clock(),
      envoyRssBytes: rssBytes(this.envoy.pid),
      aggregatorRssBytes: rssBytes(this.aggregatorPid()),
      wasmBytes: stats[WASM_MEMORY_STAT] ?? null,
      vmReloads: stats[VM_RELOAD_STAT] ?? null,
    };
    this.samples.push(s);
    return s;
  }

  latest(): MemorySample | undefined {
    return this.samples.at(-1);
  }
}
