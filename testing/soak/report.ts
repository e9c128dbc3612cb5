// The soak's Markdown summary: the verdict, requests by outcome, errors by
// kind, memory (peak, first and last minute, second-half slope against the
// levelling rule), and the events as they happened.
import { INJECTED_WINDOW_MS, OUTCOMES } from "./classify.js";
import type { SoakResult } from "./index.js";
import { JUDGED_FROM_MS, LEVEL_RISE_FLOOR_BYTES, LEVEL_RISE_SHARE, SERIES_TITLES, type Trend } from "./trend.js";

const MiB = 2 ** 20;
const mib = (bytes: number | null) => (bytes === null ? "-" : (bytes / MiB).toFixed(1));
const sec = (ms: number) => (ms / 1000).toFixed(1);
/** Unexpected requests listed one by one, at most. */
const LISTED = 30;

const OUTCOME_MEANING: Record<(typeof OUTCOMES)[number], string> = {
  ok: "a whole 200",
  refused: "429 pool_saturated with Retry-After: admission refusing a class it has no room for",
  expected: "a request wrong on purpose, answered with its documented error",
  injected: `a stream a killed pod was sending, cut within ${INJECTED_WINDOW_MS} ms of the kill`,
  unexpected: "anything else",
};

export function soakMarkdown(r: SoakResult, reasons: string[], command: string, chartFile: string): string {
  const minutes = r.settings.durationMs / 60_000;
  const judged = r.settings.durationMs >= JUDGED_FROM_MS;
  const lines = [
    `# Soak: ${minutes} min`,
    "",
    `\`${command}\`, started ${r.startedAt}, ${sec(r.elapsedMs)} s including the drain.`,
    "",
    reasons.length === 0 ? "**Passed.**" : `**Failed:**\n\n${reasons.map((x) => `- ${x}`).join("\n")}`,
    "",
    `![soak chart](${chartFile})`,
    "",
    "## Requests",
    "",
    `${r.requests} requests at ${r.settings.ratePerS}/s (seed ${r.settings.seed}): chat and text completions, streamed or not, for`,
    "llama-3.1-8b (vLLM metrics), its adapters sql-lora and chat-lora, and qwen3-32b (SGLang metrics), with every",
    "x-llm-priority class or none; one in ten wrong on purpose.",
    "",
    "| outcome | requests | meaning |",
    "|---|---:|---|",
    ...OUTCOMES.map((o) => `| ${o} | ${r.byOutcome[o]} | ${OUTCOME_MEANING[o]} |`),
    "",
    "| outcome | kind | requests |",
    "|---|---|---:|",
    ...OUTCOMES.filter((o) => o !== "ok").flatMap((o) => Object.entries(r.byKind[o]).sort(([, a], [, b]) => b - a).map(([k, n]) => `| ${o} | ${k} | ${n} |`)),
    "",
    ...unexpectedList(r),
    "## Memory",
    "",
    `Sampled every ${sec(r.settings.sampleEveryMs)} s. Levels off: the highest sample of the run's second half is at most`,
    `${LEVEL_RISE_SHARE * 100}% (${LEVEL_RISE_FLOOR_BYTES / 1024} KiB at least) above the highest of its first half: a Node process's RSS climbs`,
    "for minutes between major collections, so its high-water mark, not a fitted slope, shows whether it levels off." +
      (judged ? "" : ` Judged only on runs of ${JUDGED_FROM_MS / 60_000} min or more; shown here for information.`),
    "",
    "| series | peak (MiB) | first minute (MiB) | last minute (MiB) | second-half slope (KiB/min) | first-half peak (MiB) | second-half peak (MiB) | allowed rise (KiB) | levels off |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ...r.trends.map(trendRow),
    "",
    `Wasm memory is the filter's gauge \`llm_gateway.wasm_memory_bytes\`, the sum over its VMs (one per Envoy worker and one on the main thread);` +
      ` VM reloads during the run: ${r.samples.at(-1)?.vmReloads ?? "-"}.`,
    `Joins and leaves: ${r.settings.membershipBy}.`,
    "",
    "## Events",
    "",
    "| at (s) | event | pool | pod | took (ms) | note |",
    "|---:|---|---|---|---:|---|",
    ...r.events.map((e) => {
      const recovery = e.kind === "restore" ? r.recoveries.find((x) => x.pod === e.pod && x.restoredAtMs === e.doneMs) : undefined;
      const note = e.kind === "kill"
        ? `${e.streamsUnderway} streams under way, ${e.requestsHeld} requests held`
        : recovery ? (recovery.servedAgainAfterMs === null ? "served nothing after" : `served again after ${sec(recovery.servedAgainAfterMs)} s`) : "";
      return `| ${sec(e.atMs)} | ${e.kind} | ${e.pool} | ${e.pod} | ${Math.round(e.doneMs - e.atMs)} | ${note} |`;
    }),
    "",
  ];
  return lines.join("\n");
}

function trendRow(t: Trend): string {
  const kib = (b: number | null) => (b === null ? "-" : (b / 1024).toFixed(0));
  const verdict = t.levelsOff === null ? "-" : t.levelsOff ? "yes" : "**no**";
  return `| ${SERIES_TITLES[t.series]} | ${mib(t.peakBytes)} | ${mib(t.firstMinuteMeanBytes)} | ${mib(t.lastMinuteMeanBytes)} | ` +
    `${kib(t.secondHalfSlopeBytesPerMin)} | ${mib(t.firstHalfPeakBytes)} | ${mib(t.secondHalfPeakBytes)} | ${kib(t.allowedRiseBytes)} | ${verdict} |`;
}

function unexpectedList(r: SoakResult): string[] {
  const bad = r.notOk.filter((x) => x.outcome === "unexpected");
  if (bad.length === 0) return [];
  return [
    `Unexpected requests${bad.length > LISTED ? ` (first ${LISTED} of ${bad.length})` : ""}:`,
    "",
    "| # | sent (s) | ended (s) | kind | model | stream | served by | what |",
    "|---:|---:|---:|---|---|---|---|---|",
    ...bad.slice(0, LISTED).map((x) =>
      `| ${x.index} | ${sec(x.sentMs)} | ${x.endMs === undefined ? "-" : sec(x.endMs)} | ${x.kind} | ${x.model} | ${x.stream} | ${x.servedBy ?? "-"} | ${x.outcomeKind}: ${(x.error?.message ?? "").replace(/\|/g, "/").slice(0, 160)} |`),
    "",
  ];
}
