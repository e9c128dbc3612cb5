// The filter's Wasm linear memory as an Envoy gauge,
// wasmcustom.llm_gateway.wasm_memory_bytes: Envoy's stats count the Wasm VMs
// but say nothing of their size, and a long run must show whether the
// filter's memory levels off. Each VM of the filter (one per worker, one on
// the main thread) adds the growth of its own memory, so the gauge is the sum
// over them. Linear memory never shrinks; memory.size() costs no host call,
// so the tick checks it every time and reports only a change. A VM rebuilt
// after a crash (FAIL_RELOAD) adds its size again while the dead VM's share
// stays counted: read the gauge together with wasm.llm_gateway.vm_reload.
import { defineMetric, incrementMetric, MetricType } from "../abi/hostcalls";

const PAGE_BYTES: i64 = 65536;

let gauge: u32 = 0;
let defined = false;
let reportedPages: i32 = 0;

/** Adds this VM's memory growth since the last call to the gauge. */
export function reportMemoryGrowth(): void {
  const pages = memory.size();
  if (pages == reportedPages) return;
  if (!defined) {
    gauge = defineMetric(MetricType.Gauge, "llm_gateway.wasm_memory_bytes");
    defined = true;
  }
  incrementMetric(gauge, <i64>(pages - reportedPages) * PAGE_BYTES);
  reportedPages = pages;
}
