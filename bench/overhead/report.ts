// The overhead report's markdown (BENCHMARKS.md's "Filter overhead" section).
import { countsMarkdown } from "./counts.js";
import type { NativeTiming } from "./native.js";
import { MODE_LABELS, type ModeStats, type OverheadCell, type OverheadReport, type RunStats } from "./tally.js";
import { CHAT_PATH } from "./workload.js";
import { markdownTable, tableOf, type Column } from "../report/table.js";

const DISTURBED_CORES = 0.1;

const kib = (bytes: number) => (bytes % 1024 === 0 ? `${bytes / 1024} KiB` : `${bytes} B`);
const ms = (v: number) => v.toFixed(3);
const signed = (v: number, digits: number) => (v >= 0 ? "+" : "") + v.toFixed(digits);
const us = (v: number | null) => (v === null ? "n/a" : v.toFixed(1));

const cellLabel = (c: OverheadCell) => (c.response === "sse" ? "SSE" : "JSON");

function failures(cells: OverheadCell[]): string[] {
  const out: string[] = [];
  for (const c of cells) {
    for (const [mode, stats] of [["with", c.withFilter], ["floor", c.floorFilter], ["without", c.withoutFilter]] as const) {
      for (const run of [stats.latency, stats.saturation]) {
        if (run.non2xx + run.errors > 0) {
          out.push(`${kib(c.bodyBytes)} × ${c.endpoints} endpoints, ${cellLabel(c)}, ${MODE_LABELS[mode]}, ${run.connections} connection(s): ` +
            `${run.non2xx} non-2xx, ${run.errors} errors (${run.timeouts} timeouts)`);
        }
      }
    }
  }
  return out;
}

const added = (v: number | null) => (v === null ? "n/a" : signed(v, 1));

/** The three Envoys of a cell, by the names the tables give them. */
type Envoy = "plain" | "floor" | "ours";
const envoy = (c: OverheadCell, e: Envoy): ModeStats => (e === "plain" ? c.withoutFilter : e === "floor" ? c.floorFilter : c.withFilter);
const latency = (c: OverheadCell, e: Envoy) => envoy(c, e).latency.latencyMs;
const saturation = (c: OverheadCell, e: Envoy) => envoy(c, e).saturation;
const rateRatio = (c: OverheadCell, a: Envoy, b: Envoy) => (saturation(c, a).requestsPerS / saturation(c, b).requestsPerS).toFixed(2);
/** Envoy CPU per request at saturation, `a`'s over `b`'s. */
function addedCpuUs(c: OverheadCell, a: Envoy, b: Envoy): number | null {
  const [x, y] = [saturation(c, a).cpu.envoyUs, saturation(c, b).cpu.envoyUs];
  return x === null || y === null ? null : x - y;
}

/** The columns that say which cell a row is. */
const CELL_COLUMNS: Column<OverheadCell>[] = [
  ["Body", false, (c) => kib(c.bodyBytes)],
  ["Endpoints", true, (c) => String(c.endpoints)],
  ["Answer", false, cellLabel],
];

export function overheadMarkdown(r: OverheadReport): string {
  const s = r.settings;
  const lines: string[] = [];
  lines.push("## Filter overhead", "");
  lines.push(`Command: \`${r.command}\` (${r.startedAt}, ${r.elapsedS.toFixed(0)} s in all)`, "");
  lines.push(
    `Three Envoys from one rendered envoy/gateway.yaml, in the same run: **ours** (the gateway filter, snapshot ` +
      `pushed by the real gRPC push server), the **floor** (assembly/floor-filter.ts in the gateway filter's place: it ` +
      `buffers the body until end of stream and sets one header, nothing else: what any buffering Wasm filter pays) and ` +
      `**plain** (no Wasm at all); floor and plain route ROUND_ROBIN over the same upstream ports. Instant upstream: ` +
      `node:http on one loopback port per endpoint, answering JSON, or for a streamed request (SSE) ${s.streamChunks} ` +
      `content events, a finish, a usage event and [DONE]. Load: ${s.loadGenerator}, POST ${CHAT_PATH} with a chat body ` +
      `padded to size. Each measurement alternates ${s.order.join(", ")} (${s.durationS} s measured per mode, each ` +
      `segment after a ${s.warmupS} s warm-up; every Envoy first gets ${s.startupWarmupS} s of load so V8 has tiered its code up).`,
    "",
  );

  lines.push(`### Added latency (${s.latencyConnections} connection, closed loop)`, "");
  lines.push(markdownTable(tableOf<OverheadCell>([
    ...CELL_COLUMNS,
    ["p50 plain (ms)", true, (c) => ms(latency(c, "plain").p50)],
    ["p50 floor", true, (c) => ms(latency(c, "floor").p50)],
    ["p50 ours", true, (c) => ms(latency(c, "ours").p50)],
    ["ours − plain", true, (c) => signed(latency(c, "ours").p50 - latency(c, "plain").p50, 3)],
    ["ours − floor", true, (c) => signed(latency(c, "ours").p50 - latency(c, "floor").p50, 3)],
    ["p99 plain", true, (c) => ms(latency(c, "plain").p99)],
    ["p99 floor", true, (c) => ms(latency(c, "floor").p99)],
    ["p99 ours", true, (c) => ms(latency(c, "ours").p99)],
  ], r.cells)), "");

  lines.push(`### Throughput and Envoy CPU at saturation (${s.saturationConnections} connections)`, "");
  const cores = (v: number | null) => (v === null ? "n/a" : v.toFixed(2));
  const envoyCores = (run: RunStats) => (run.cpu.envoyUs === null ? null : (run.cpu.envoyUs * run.requestsPerS) / 1e6);
  lines.push(markdownTable(tableOf<OverheadCell>([
    ...CELL_COLUMNS,
    ["req/s plain", true, (c) => saturation(c, "plain").requestsPerS.toFixed(0)],
    ["floor", true, (c) => saturation(c, "floor").requestsPerS.toFixed(0)],
    ["ours", true, (c) => saturation(c, "ours").requestsPerS.toFixed(0)],
    ["floor/plain", true, (c) => rateRatio(c, "floor", "plain")],
    ["ours/plain", true, (c) => rateRatio(c, "ours", "plain")],
    ["ours/floor", true, (c) => rateRatio(c, "ours", "floor")],
    ["Envoy CPU µs/req plain", true, (c) => us(saturation(c, "plain").cpu.envoyUs)],
    ["floor", true, (c) => us(saturation(c, "floor").cpu.envoyUs)],
    ["ours", true, (c) => us(saturation(c, "ours").cpu.envoyUs)],
    ["ours over plain", true, (c) => added(addedCpuUs(c, "ours", "plain"))],
    ["ours over floor", true, (c) => added(addedCpuUs(c, "ours", "floor"))],
    ["Envoy cores busy (plain / floor / ours)", true, (c) => (["plain", "floor", "ours"] as const).map((e) => cores(envoyCores(saturation(c, e)))).join(" / ")],
    ["ports hit by ours (min–max req/port)", true, (c) => { const sp = saturation(c, "ours").spread; return `${sp.endpointsHit}/${sp.endpoints} (${sp.minHits}–${sp.maxHits})`; }],
  ], r.cells)));
  lines.push(
    "",
    `Envoy runs one worker: when its busy cores are near 1, that worker was the bottleneck and the ratio is the ` +
      `filter's cost on a proxy core; well below 1, the load generator or the upstream (same machine) limited ` +
      `throughput and the ratio understates it. Envoy CPU µs per request does not depend on that.`,
    "",
  );

  // The streamed cell against the JSON cell of the same endpoint count and body.
  const sse = r.cells.find((c) => c.response === "sse");
  const json = sse && r.cells.find((c) => c.response === "json" && c.endpoints === sse.endpoints && c.bodyBytes === sse.bodyBytes);
  if (sse && json) {
    const ratio = (a: number | null, b: number | null) => (a === null || b === null || b <= 0 ? "n/a" : `${(a / b).toFixed(2)}×`);
    lines.push(`### Streaming (${kib(sse.bodyBytes)} body, ${sse.endpoints} endpoints, ${s.streamChunks}-chunk SSE answer)`, "");
    const rows = [["ours over plain", "plain"], ["ours over floor", "floor"]] as const;
    lines.push(markdownTable(tableOf<(typeof rows)[number]>([
      ["Added Envoy CPU per response", false, ([label]) => label],
      ["JSON answer (µs)", true, ([, e]) => added(addedCpuUs(json, "ours", e))],
      ["SSE answer (µs)", true, ([, e]) => added(addedCpuUs(sse, "ours", e))],
      ["SSE / JSON", true, ([, e]) => ratio(addedCpuUs(sse, "ours", e), addedCpuUs(json, "ours", e))],
    ], rows)));
    lines.push(
      "",
      "The upstream writes each event separately; Envoy hands the filter what one socket read brings, so the filter " +
        "may see fewer data frames than events. The emulator counts below feed it one frame per event.",
      "",
    );
  }

  lines.push(...countsMarkdown(r.counts));

  lines.push("### Routing decision in the native build (build/native.wasm in Node)", "");
  lines.push(markdownTable(tableOf<NativeTiming>([
    ["Body", false, (n) => kib(n.bodyBytes)],
    ["Endpoints", true, (n) => (n.endpoints === 1 ? "1 (no scoring)" : String(n.endpoints))],
    ["p50 (µs)", true, (n) => n.p50Us.toFixed(2)],
    ["p99 (µs)", true, (n) => n.p99Us.toFixed(2)],
    ["mean (µs)", true, (n) => n.meanUs.toFixed(2)],
    ["decisions timed", true, (n) => String(n.decisions)],
  ], r.native)));
  lines.push(
    "",
    "Each decision scans the body, looks up the model and scores the pool (whole up to 32 usable pods, else its shortlist); the time also includes the native " +
      "build's JS↔Wasm boundary (body copied in, a JSON result string out and parsed) and a hrtime call.",
    "",
  );

  lines.push(
    "What the filter does per request, host call by host call, what it allocates and where its instructions go: " +
      "[docs/host-calls.md](docs/host-calls.md).",
    "",
  );

  const others = r.cells.flatMap((c) =>
    [c.withFilter, c.floorFilter, c.withoutFilter].flatMap((m) => [m.latency.cpu.otherBusyCores, m.saturation.cpu.otherBusyCores]),
  );
  const worstOther = Math.max(...others.map((o) => o ?? 0));
  if (worstOther > DISTURBED_CORES) {
    lines.push(
      `**Disturbed:** other processes on the machine kept up to ${worstOther.toFixed(2)} cores busy during a ` +
        `measured run; treat these figures with suspicion.`,
      "",
    );
  }

  const bad = failures(r.cells);
  if (bad.length > 0) {
    lines.push("### Failed requests", "");
    for (const b of bad) lines.push(`- ${b}`);
    lines.push("");
  }

  const m = r.machine;
  lines.push(
    `Machine: ${m.cpus} × ${m.cpuModel}, ${m.memoryGiB.toFixed(0)} GiB, ${m.platform}, Node ${m.node}, Envoy ${m.envoy} ` +
      `(--concurrency ${s.envoyConcurrency}). The load generator (this process), the upstream + snapshot server (one ` +
      `child process) and Envoy all share these ${m.cpus} cores over loopback, so they compete for CPU at saturation; ` +
      `numbers move a few percent between runs, and p99 at one connection by more.`,
  );
  return lines.join("\n") + "\n";
}
