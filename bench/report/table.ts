// The per-policy results table of one scenario, with each policy's change
// against the baseline (round-robin), as Markdown or aligned console text.
import { BASELINE } from "../policies/index.js";
import { formatChange, relativeChange } from "../stats.js";
import { SLO_TTFT_MS, type PolicyResult, type ScenarioResult } from "../types.js";

export interface Table {
  headers: string[];
  /** Right-align these columns. */
  numeric: boolean[];
  rows: string[][];
}

/** 232 ms, 1.41 s, 177.6 s. */
export function formatMs(ms: number | undefined): string {
  if (ms === undefined) return "n/a";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(2)} s`;
  return `${(ms / 1000).toFixed(1)} s`;
}

export const percent = (x: number) => `${(x * 100).toFixed(0)}%`;

/** A share where a whole percent would hide what matters near 0 and 100: "99.6%", "0.4%", "0", "100%". */
export function percentOf(x: number): string {
  if (x === 0) return "0";
  if (x === 1) return "100%";
  const pct = x * 100;
  return `${pct < 1 || pct > 99 ? pct.toFixed(1) : pct.toFixed(0)}%`;
}

export function errorsCell(p: Pick<PolicyResult, "errors" | "errorsByReason">): string {
  if (p.errors === 0) return "0";
  const reasons = Object.entries(p.errorsByReason).map(([r, n]) => `${n} ${r}`);
  return `${p.errors} (${reasons.join(", ")})`;
}

/** The busiest and the idlest pod's share of the requests, e.g. "17% / 8%": how even (or how skewed) the split is. */
export function podShareCell(share: Record<string, number>): string {
  const values = Object.values(share);
  // Real servers do not say which pod answered (the fakes' x-served-by).
  return values.every((v) => v === 0) ? "n/a" : `${percent(Math.max(...values))} / ${percent(Math.min(...values))}`;
}

/** "TTFT ≤ 2 s", ...: the SLO goodput columns' headers, aligned with SLO_TTFT_MS. */
export const SLO_HEADERS = SLO_TTFT_MS.map((ms) => `TTFT ≤ ${ms / 1000} s`);

/** Whether a scenario has adapters: otherwise a column of zeros would only take room. */
export const anyAdapterLoads = (policies: readonly PolicyResult[]) => policies.some((p) => (p.adapterLoads ?? 0) > 0);

/** Header, right-aligned or not, and the cell of one row. */
export type Column<T> = [string, boolean, (row: T) => string];

export function tableOf<T>(columns: readonly Column<T>[], rows: readonly T[]): Table {
  return {
    headers: columns.map((c) => c[0]),
    numeric: columns.map((c) => c[1]),
    rows: rows.map((r) => columns.map((c) => c[2](r))),
  };
}

export function resultsTable(result: ScenarioResult): Table {
  const base = result.policies.find((p) => p.policy === BASELINE);
  const vs = (f: (p: PolicyResult) => number | undefined) => (p: PolicyResult) =>
    base === undefined || p === base ? "-" : formatChange(relativeChange(f(p), f(base)));
  const columns: Column<PolicyResult>[] = [
    ["policy", false, (p) => p.policy],
    ...SLO_HEADERS.map((h, i): Column<PolicyResult> => [h, true, (p) => (p.ttftSlo ? percentOf(p.ttftSlo.all[i]) : "n/a")]),
    ["completed", true, (p) => `${p.completed}/${p.requests} (${percentOf(p.completedShare)})`],
    ["1st try refused", true, (p) => percentOf(p.firstRefusedShare)],
    ["TTFT p50", true, (p) => formatMs(p.ttftMs?.p50)],
    ["TTFT p95", true, (p) => formatMs(p.ttftMs?.p95)],
    ["TTFT p99", true, (p) => formatMs(p.ttftMs?.p99)],
    ["E2E p50", true, (p) => formatMs(p.e2eMs?.p50)],
    ["E2E p95", true, (p) => formatMs(p.e2eMs?.p95)],
    ["E2E p99", true, (p) => formatMs(p.e2eMs?.p99)],
    ["req/s", true, (p) => p.throughput.requestsPerS.toFixed(2)],
    ["out tok/s", true, (p) => p.throughput.outputTokensPerS.toFixed(0)],
    ["prefix hits", true, (p) => percent(p.prefixHitRate)],
  ];
  if (result.policies.some((p) => p.serverCacheReuse !== null)) columns.push(["server cache reuse", true, (p) => (p.serverCacheReuse === null ? "n/a" : percent(p.serverCacheReuse))]);
  if (anyAdapterLoads(result.policies)) columns.push(["adapter loads /1k req", true, (p) => p.adapterLoadsPer1k?.toFixed(1) ?? "n/a"]);
  columns.push(
    ["preemptions", true, (p) => (p.preemptions === null ? "n/a" : String(p.preemptions))],
    ["pod share max / min", true, (p) => podShareCell(p.podShare)],
    ["timeouts", true, (p) => String(p.timeouts)],
    ["errors", true, errorsCell],
  );
  if (base) {
    columns.push(
      ["p95 TTFT vs RR", true, vs((p) => p.ttftMs?.p95)],
      ["p99 TTFT vs RR", true, vs((p) => p.ttftMs?.p99)],
      ["p95 E2E vs RR", true, vs((p) => p.e2eMs?.p95)],
      ["req/s vs RR", true, vs((p) => p.throughput.requestsPerS)],
    );
  }
  return tableOf(columns, result.policies);
}

export function markdownTable(t: Table): string {
  const line = (cells: string[]) => `| ${cells.join(" | ")} |`;
  const rule = t.numeric.map((n) => (n ? "---:" : "---"));
  return [line(t.headers), line(rule), ...t.rows.map(line)].join("\n");
}

export function consoleTable(t: Table): string {
  const widths = t.headers.map((h, i) => Math.max(h.length, ...t.rows.map((r) => r[i].length)));
  const pad = (cells: string[]) => cells.map((c, i) => (t.numeric[i] ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join("  ");
  return [pad(t.headers), widths.map((w) => "-".repeat(w)).join("  "), ...t.rows.map(pad)].join("\n");
}
