// Admission tables, for runs with classes or refusals: per policy
// the refusals by class, the retries' success, Critical refused while
// Sheddable got in, and TTFT through the load step; the step's 5-s windows;
// and ours with against without admission. With several seeds a cell lists
// each seed's value, "a / b / c", as the p95-by-seed column does.
import { RECOVERED_WITHIN, WINDOW_S } from "../admission.js";
import type { AdmissionSummary } from "../admission.js";
import { BASELINE } from "../policies/index.js";
import { formatChange, relativeChange } from "../stats.js";
import { PRIORITIES, type PolicyResult, type ScenarioResult } from "../types.js";
import { formatMs, tableOf, type Column, type Table } from "./table.js";

/** The name suffix of our policy with admission turned off (policies/ours.ts). */
export const NO_ADMISSION = ":no-admission";

const pct = (x: number) => `${(x * 100).toFixed(x > 0 && x < 0.1 ? 1 : 0)}%`;
const share = (n: number, of: number) => (of > 0 ? pct(n / of) : "-");

/** Whether a run is about admission: some request had a class other than Standard, or some policy refused. */
export function showsAdmission(r: ScenarioResult): boolean {
  return r.policies.some((p) => {
    const a = p.admission;
    return a.total.refused > 0 || a.byClass.critical.requests > 0 || a.byClass.sheddable.requests > 0;
  });
}

/** One cell per seed, joined; identical values once. */
function perSeed(values: readonly string[]): string {
  return values.every((v) => v === values[0]) ? values[0] : values.join(" / ");
}

/** The policy's result in each run, in run order. */
function byPolicy(runs: readonly ScenarioResult[]): Array<{ policy: string; results: PolicyResult[]; bases: Array<PolicyResult | undefined> }> {
  return runs[0].policies.map((p) => ({
    policy: p.policy,
    results: runs.map((r) => r.policies.find((q) => q.policy === p.policy)!),
    bases: runs.map((r) => r.policies.find((q) => q.policy === BASELINE)),
  }));
}

function refusedCell(a: AdmissionSummary): string {
  return a.total.refused === 0 ? "0" : `${a.total.refused} (${share(a.total.refused, a.total.requests)})`;
}

// Inside a cell values are separated by commas: " / " separates seeds.
function byClassCell(a: AdmissionSummary): string {
  return PRIORITIES.map((c) => share(a.byClass[c].refused, a.byClass[c].requests)).join(", ");
}

function retryCell(a: AdmissionSummary): string {
  return a.retrySuccess === null ? "-" : `${pct(a.retrySuccess)} (${a.total.retriedCompleted}/${a.total.retried})`;
}

function peakCell(a: AdmissionSummary): string {
  const s = a.step;
  if (!s || s.stepPeakP95Ms === null) return "-";
  return `${formatMs(s.stepPeakP95Ms)} (${s.stepPeakRatio?.toFixed(2) ?? "?"}×)`;
}

function recoveryCell(a: AdmissionSummary): string {
  const s = a.step;
  if (!s) return "-";
  return s.recoveryS === null ? "never" : `${s.recoveryS} s`;
}

function stepRefusalsCell(a: AdmissionSummary): string {
  const s = a.step;
  return s ? `${s.refusalsBefore}, ${s.refusalsDuring}, ${s.refusalsAfter} (${s.refusalsAfterFirstAttempts})` : "-";
}

export function admissionTable(runs: readonly ScenarioResult[]): Table {
  const hasStep = runs[0].policies.some((p) => p.admission.step !== null);
  type Row = ReturnType<typeof byPolicy>[number];
  const cell = (f: (a: AdmissionSummary, p: PolicyResult) => string) => (row: Row) => perSeed(row.results.map((p) => f(p.admission, p)));
  const vs = (f: (p: PolicyResult) => number) => (row: Row) =>
    row.policy === BASELINE ? "-" : perSeed(row.results.map((p, i) => (row.bases[i] ? formatChange(relativeChange(f(p), f(row.bases[i]!))) : "n/a")));
  const columns: Column<Row>[] = [
    ["policy", false, (row) => row.policy],
    ["429s (first attempts)", true, cell(refusedCell)],
    [`refused: ${PRIORITIES.map((c) => c[0].toUpperCase() + c.slice(1)).join(", ")}`, true, cell(byClassCell)],
    ["retried OK", true, cell(retryCell)],
    ["refused twice", true, cell((a) => String(a.total.finalRefused))],
    ["Critical refused while Sheddable admitted", true, cell((a) => String(a.criticalWhileSheddable))],
  ];
  if (hasStep) {
    columns.push(
      ["base p95 TTFT", true, cell((a) => formatMs(a.step?.baseP95Ms ?? undefined))],
      ["step peak p95 (× base)", true, cell(peakCell)],
      [`recovery (p95 ≤ ${RECOVERED_WITHIN}× base)`, true, cell(recoveryCell)],
      ["429s before, in, after step (first attempts after)", true, cell(stepRefusalsCell)],
    );
  }
  columns.push(
    ["retried TTFT p95: from retry, from first attempt", true, cell((a) => (a.retriedTtftMs ? `${formatMs(a.retriedTtftMs.fromRetry.p95)}, ${formatMs(a.retriedTtftMs.fromFirstAttempt.p95)}` : "-"))],
    ["req/s vs RR", true, vs((p) => p.throughput.requestsPerS)],
    ["out tok/s vs RR", true, vs((p) => p.throughput.outputTokensPerS)],
  );
  return tableOf(columns, byPolicy(runs));
}

/** Windows shown around the step: from its start to this long after its end (a Retry-After is at most 60 s by default, so retries land within it). */
const AFTER_STEP_S = 60;

/**
 * p95 TTFT (from first arrival) and 429s per 5-s window, one column per policy: the
 * base load first, then the step and the time after it; one run (seed).
 */
export function stepWindowsTable(r: ScenarioResult): Table | null {
  const step = r.policies.find((p) => p.admission.step)?.admission.step;
  if (!step) return null;
  type Row = { label: string; t: number | null };
  const rows: Row[] = [{ label: `base (0–${step.baseEndS} s)`, t: null }];
  for (let t = step.stepStartS; t < step.stepEndS + AFTER_STEP_S; t += WINDOW_S) {
    rows.push({ label: `${t}–${t + WINDOW_S} s${t >= step.stepEndS ? " (after)" : ""}`, t });
  }
  const refusalsIn = (a: AdmissionSummary, t: number) => a.refusalsPerS.filter((x) => x.t >= t && x.t < t + WINDOW_S).reduce((s, x) => s + x.n, 0);
  const columns: Column<Row>[] = [
    ["window", false, (row) => row.label],
    ...r.policies.map((p): Column<Row> => [
      p.policy,
      true,
      (row) => {
        const a = p.admission;
        if (row.t === null) return formatMs(a.step?.baseP95Ms ?? undefined);
        const w = a.windows.find((x) => x.t === row.t);
        const n = refusalsIn(a, row.t);
        return `${w ? formatMs(w.p95) : "n/a"}${n > 0 ? ` · ${n}×429` : ""}`;
      },
    ]),
  ];
  return tableOf(columns, rows);
}

/** One scenario's row of the with/without comparison: each seed's value per cell. */
export interface OnOffRow {
  scenario: string;
  policy: string;
  refusedWith: number[];
  refusedWithout: number[];
  /** Per seed, relative change with admission against without. */
  p50: Array<number | null>;
  p95: Array<number | null>;
  p99: Array<number | null>;
  requestsPerS: Array<number | null>;
}

/** A row for each of our policies that has an admission-off twin in the runs. */
export function onOffRows(runs: readonly ScenarioResult[]): OnOffRow[] {
  const names = new Set(runs[0].policies.map((p) => p.policy));
  const ours = [...names].filter((n) => n.startsWith("ours:") && !n.endsWith(NO_ADMISSION) && names.has(n + NO_ADMISSION));
  return ours.map((on) => {
    const off = on + NO_ADMISSION;
    const pairs = runs.map((r) => [r.policies.find((p) => p.policy === on)!, r.policies.find((p) => p.policy === off)!] as const);
    const change = (f: (p: PolicyResult) => number | undefined) => pairs.map(([a, b]) => relativeChange(f(a), f(b)));
    return {
      scenario: runs[0].scenario,
      policy: on,
      refusedWith: pairs.map(([a]) => a.admission.total.refused),
      refusedWithout: pairs.map(([, b]) => b.admission.total.refused),
      p50: change((p) => p.ttftMs?.p50),
      p95: change((p) => p.ttftMs?.p95),
      p99: change((p) => p.ttftMs?.p99),
      requestsPerS: change((p) => p.throughput.requestsPerS),
    };
  });
}

/** "+0.3%", "-12.5%", "0.0%": one decimal always, the 1% target being the point. */
function change1(c: number | null): string {
  if (c === null) return "n/a";
  const text = (c * 100).toFixed(1);
  return Number(text) === 0 ? "0.0%" : `${c > 0 ? "+" : ""}${text}%`;
}

/** Ours with admission against without, one row per scenario (and profile). */
export function onOffTable(rows: readonly OnOffRow[]): Table {
  const changes = (xs: Array<number | null>) => perSeed(xs.map(change1));
  const columns: Column<OnOffRow>[] = [
    ["scenario", false, (row) => row.scenario],
    ["policy", false, (row) => row.policy],
    ["429s with admission", true, (row) => perSeed(row.refusedWith.map(String))],
    ["429s without", true, (row) => perSeed(row.refusedWithout.map(String))],
    ["TTFT p50", true, (row) => changes(row.p50)],
    ["TTFT p95", true, (row) => changes(row.p95)],
    ["TTFT p99", true, (row) => changes(row.p99)],
    ["req/s", true, (row) => changes(row.requestsPerS)],
  ];
  return tableOf(columns, rows);
}
