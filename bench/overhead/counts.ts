// The overhead bench's deterministic counts: host calls and executed Wasm
// instructions per request, with build/filter.wasm (and the floor filter)
// instrumented by the emulator's instruction counter and hosted on the
// proxy-wasm emulator, on a clock that never moves. The same build gives the
// same numbers on any machine under any load, so a regression shows here even
// when the timings are noise.
import { readFileSync } from "node:fs";
import { filterWasmPath } from "../../host/paths.js";
import { EmulatedGateway } from "../../testing/proxy-wasm-emulator/gateway.js";
import { instrumentInstructionCount, INSTRUCTION_COUNTER_EXPORT, ProxyWasmHost, type WasmVm } from "../../testing/proxy-wasm-emulator/index.js";
import { floorWasmPath } from "../floor-envoy.js";
import { markdownTable, tableOf } from "../report/table.js";
import { benchSnapshot, CHAT_PATH, chatBody, JSON_ANSWER, STREAM_CHUNKS, streamEvents } from "./workload.js";

export interface CountRow {
  filter: "ours" | "floor";
  endpoints: number;
  response: "json" | "sse";
  /** Proxy-wasm host calls per request, all callbacks from headers to the stream's end. */
  hostCalls: number;
  hostCallsByImport: Record<string, number>;
  /** Wasm instructions executed per request (a host call counts as one). */
  wasmInstructions: number;
}

export interface RequestCounts {
  method: string;
  /** Wasm instructions of one garbage collection on a worker (assembly/abi/collector.ts: about once a second), per pool size. */
  collections: Array<{ endpoints: number; wasmInstructions: number }>;
  bodyBytes: number;
  /** Requests measured per row, one after another, after as many to warm up. */
  requests: number;
  rows: CountRow[];
}

const START_MS = 1_750_000_000_000;
const REQUESTS = 16;
const METHOD =
  "build/filter.wasm and build/floor-filter.wasm rewritten to count executed instructions " +
  "(testing/proxy-wasm-emulator/instruction-counter.ts), hosted on the proxy-wasm emulator (one worker, clock fixed); " +
  "each request is sent whole, answered (one JSON chunk, or one data frame per SSE event) and ended with 200 from its pick";

function measure(vm: WasmVm, run: () => void): Pick<CountRow, "hostCalls" | "hostCallsByImport" | "wasmInstructions"> {
  for (let i = 0; i < REQUESTS; i++) run(); // first requests define their counters once
  vm.resetHostCalls();
  const before = BigInt(vm.exportedGlobal(INSTRUCTION_COUNTER_EXPORT) ?? 0);
  for (let i = 0; i < REQUESTS; i++) run();
  const instructions = BigInt(vm.exportedGlobal(INSTRUCTION_COUNTER_EXPORT) ?? 0) - before;
  const byImport = Object.fromEntries(Object.entries(vm.hostCalls()).map(([k, v]) => [k, v / REQUESTS]));
  return { hostCalls: vm.hostCallTotal() / REQUESTS, hostCallsByImport: byImport, wasmInstructions: Number(instructions) / REQUESTS };
}

function request(body: string) {
  return { headers: { ":method": "POST", ":path": CHAT_PATH, "content-type": "application/json", "content-length": String(body.length) }, body };
}

function benchGateway(module: WebAssembly.Module, endpoints: number): EmulatedGateway {
  const gateway = new EmulatedGateway({ startMs: START_MS, module });
  // Addresses are never dialled here; only their number matters.
  gateway.publish(benchSnapshot(Array.from({ length: endpoints }, (_, i) => `10.0.${i >> 8}.${i & 255}:8000`)));
  gateway.host.tick();
  return gateway;
}

/** Ticks until one collects (the costliest of 3 × TICKS ticks), less a tick's usual cost: one collection's instructions. */
function collectionCost(module: WebAssembly.Module, endpoints: number, body: string): number {
  const TICKS = 50;
  const gateway = benchGateway(module, endpoints);
  const vm = gateway.workers[0].vm;
  for (let i = 0; i < REQUESTS; i++) gateway.request(request(body)).finish({ responseCode: 200, upstreamAddress: "10.0.0.0:8000" });
  const perTick: number[] = [];
  for (let t = 0; t < 3 * TICKS; t++) {
    const before = BigInt(vm.exportedGlobal(INSTRUCTION_COUNTER_EXPORT) ?? 0);
    gateway.host.tick();
    perTick.push(Number(BigInt(vm.exportedGlobal(INSTRUCTION_COUNTER_EXPORT) ?? 0) - before));
  }
  const sorted = [...perTick].sort((a, b) => a - b);
  return sorted[sorted.length - 1] - sorted[Math.floor(sorted.length / 2)];
}

function oursRow(module: WebAssembly.Module, endpoints: number, body: string, answer: string[]): CountRow {
  const gateway = benchGateway(module, endpoints);
  const counts = measure(gateway.workers[0].vm, () => {
    const stream = gateway.request(request(body));
    const destination = stream.requestHeaders.get("x-gateway-destination-endpoint");
    if (!destination) throw new Error(`the emulated filter routed no request at ${endpoints} endpoints: ${JSON.stringify(stream.localResponse)}`);
    stream.respond(answer);
    stream.finish({ responseCode: 200, upstreamAddress: destination.split(",")[0] });
  });
  return { filter: "ours", endpoints, response: answer.length > 1 ? "sse" : "json", ...counts };
}

function floorRow(module: WebAssembly.Module, body: string): CountRow {
  const host = new ProxyWasmHost(START_MS);
  const vm = host.createVm(module, { vmId: "bench-floor" });
  const root = vm.startPlugin({ name: "bench_floor", rootId: "bench_floor", configuration: "" });
  const counts = measure(vm, () => {
    const stream = vm.createStream(root).send(request(body));
    if (stream.requestHeaders.get("x-bench-floor") !== "1") throw new Error("the emulated floor filter did not set its header");
    stream.respond([JSON_ANSWER]);
    stream.finish({ responseCode: 200, upstreamAddress: "10.0.0.1:8000" });
  });
  return { filter: "floor", endpoints: 1, response: "json", ...counts };
}

export async function countPerRequest(
  bodyBytes: number,
  endpointCounts: number[],
  streamedAt: number | null,
  progress: (line: string) => void,
): Promise<RequestCounts> {
  const ours = new WebAssembly.Module(instrumentInstructionCount(readFileSync(filterWasmPath)));
  const floor = new WebAssembly.Module(instrumentInstructionCount(readFileSync(floorWasmPath)));
  const json = chatBody(bodyBytes);
  const rows: CountRow[] = [floorRow(floor, json)];
  for (const endpoints of endpointCounts) rows.push(oursRow(ours, endpoints, json, [JSON_ANSWER]));
  if (streamedAt !== null) rows.push(oursRow(ours, streamedAt, chatBody(bodyBytes, true), streamEvents(STREAM_CHUNKS)));
  for (const r of rows) {
    progress(
      `counts, ${r.filter}, ${r.endpoints} endpoint(s), ${r.response}: ${r.hostCalls} host calls, ` +
        `${r.wasmInstructions.toFixed(0)} Wasm instructions per request`,
    );
  }
  const collections = endpointCounts.map((endpoints) => ({ endpoints, wasmInstructions: collectionCost(ours, endpoints, json) }));
  for (const c of collections) progress(`counts, one garbage collection at ${c.endpoints} endpoint(s): ${c.wasmInstructions} Wasm instructions`);
  return { method: METHOD, bodyBytes, requests: REQUESTS, rows, collections };
}

export function countsMarkdown(c: RequestCounts): string[] {
  const table = tableOf<CountRow>([
    ["Filter", false, (r) => r.filter],
    ["Endpoints", true, (r) => (r.filter === "floor" ? "—" : String(r.endpoints))],
    ["Answer", false, (r) => (r.response === "sse" ? `SSE (${STREAM_CHUNKS} chunks)` : "JSON")],
    ["host calls", true, (r) => String(r.hostCalls)],
    ["Wasm instructions", true, (r) => Math.round(r.wasmInstructions).toLocaleString("en-US")],
    ["host calls by import", false, (r) => Object.entries(r.hostCallsByImport).map(([k, v]) => `${k.replace(/^proxy_/, "")} ${v}`).join(", ")],
  ], c.rows);
  return [
    "### Deterministic counts per request (proxy-wasm emulator)", "", markdownTable(table), "",
    `${c.method}; ${c.requests} requests measured per row after ${c.requests} to warm up, ${c.bodyBytes} B bodies. ` +
      "These do not move with machine load: a change here is a change in the build. " +
      "Garbage is collected between the host's calls, about once a second per worker (assembly/abi/collector.ts), not per request: " +
      `one collection costs ${c.collections.map((x) => `${Math.round(x.wasmInstructions).toLocaleString("en-US")} at ${x.endpoints} endpoints`).join(", ")} Wasm instructions.`,
    "",
  ];
}
