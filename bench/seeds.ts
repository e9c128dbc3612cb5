// Several seeds of one scenario summarised per policy: the mean and the
// spread (min-max) of each figure, each seed's p95 TTFT, and the range of
// each seed's change against the baseline (taken within that seed's run).
import { BASELINE } from "./policies/index.js";
import { relativeChange } from "./stats.js";
import { PRIORITIES, SLO_TTFT_MS, type PolicyResult, type Priority, type ScenarioResult } from "./types.js";

export interface Spread {
  mean: number;
  min: number;
  max: number;
}

export interface PolicySeeds {
  policy: string;
  /** Null when a seed had no latency to report. */
  ttftMs: { p50: Spread; p95: Spread; p99: Spread } | null;
  /** Each seed's p95 TTFT, in seed order. */
  ttftP95BySeed: Array<number | null>;
  e2eP95Ms: Spread | null;
  /** SLO goodput, aligned with SLO_TTFT_MS: of all requests, and per class (the classes every seed had). */
  ttftSlo: { all: Spread[]; byClass: Partial<Record<Priority, Spread[]>> };
  /** Completed / offered, and first attempts refused / offered. */
  completedShare: Spread;
  firstRefusedShare: Spread;
  requestsPerS: Spread;
  prefixHitRate: Spread;
  /** By the servers' own counters; null where the pods are fakes. */
  serverCacheReuse: Spread | null;
  /** Null where the engines' counters cannot be read (live mode). */
  adapterLoadsPer1k: Spread | null;
  preemptions: Spread | null;
  /** Each pod's share of the requests, averaged over the seeds. */
  podShare: Record<string, number>;
  /** Per seed, in seed order. */
  timeouts: number[];
  errors: number[];
  /** Range of the per-seed changes against the baseline (e.g. -0.93); null for the baseline itself or without one. */
  vsBaseline: { ttftP95: Spread; ttftP99: Spread; requestsPerS: Spread } | null;
}

export interface SeedsSummary {
  scenario: string;
  description: string;
  mode: ScenarioResult["mode"];
  seeds: number[];
  durationS: number;
  /** Requests offered in each seed's trace. */
  requests: number[];
  policies: PolicySeeds[];
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** Mean and range, rounded to 3 decimals (a one-seed summary is not: it stands for the run); null if any value is missing. */
export function spread(values: ReadonlyArray<number | null | undefined>, round = round3): Spread | null {
  if (values.length === 0 || values.some((v) => v === null || v === undefined)) return null;
  const xs = values as number[];
  return { mean: round(xs.reduce((s, x) => s + x, 0) / xs.length), min: round(Math.min(...xs)), max: round(Math.max(...xs)) };
}

function summarisePolicy(name: string, runs: readonly ScenarioResult[]): PolicySeeds {
  const mine = runs.map((r) => r.policies.find((p) => p.policy === name)!);
  const round = runs.length > 1 ? round3 : (x: number) => x;
  const of = (f: (p: PolicyResult) => number | null | undefined) => spread(mine.map(f), round);
  const p50 = of((p) => p.ttftMs?.p50);
  const p95 = of((p) => p.ttftMs?.p95);
  const p99 = of((p) => p.ttftMs?.p99);
  const bases = runs.map((r) => r.policies.find((p) => p.policy === BASELINE));
  const change = (f: (p: PolicyResult) => number | undefined) => spread(mine.map((p, i) => (bases[i] ? relativeChange(f(p), f(bases[i]!)) : null)), round);
  let vsBaseline: PolicySeeds["vsBaseline"] = null;
  if (name !== BASELINE) {
    const ttftP95 = change((p) => p.ttftMs?.p95);
    const ttftP99 = change((p) => p.ttftMs?.p99);
    const requestsPerS = change((p) => p.throughput.requestsPerS);
    if (ttftP95 && ttftP99 && requestsPerS) vsBaseline = { ttftP95, ttftP99, requestsPerS };
  }
  const podShare: Record<string, number> = {};
  for (const pod of Object.keys(mine[0].podShare)) podShare[pod] = round(mine.reduce((s, p) => s + p.podShare[pod], 0) / mine.length);
  return {
    policy: name,
    ttftMs: p50 && p95 && p99 ? { p50, p95, p99 } : null,
    ttftP95BySeed: mine.map((p) => p.ttftMs?.p95 ?? null),
    e2eP95Ms: of((p) => p.e2eMs?.p95),
    ttftSlo: sloSpreads(mine, round),
    completedShare: of((p) => p.completedShare)!,
    firstRefusedShare: of((p) => p.firstRefusedShare)!,
    requestsPerS: of((p) => p.throughput.requestsPerS)!,
    prefixHitRate: of((p) => p.prefixHitRate)!,
    serverCacheReuse: of((p) => p.serverCacheReuse),
    adapterLoadsPer1k: of((p) => p.adapterLoadsPer1k),
    preemptions: of((p) => p.preemptions),
    podShare,
    timeouts: mine.map((p) => p.timeouts),
    errors: mine.map((p) => p.errors),
    vsBaseline,
  };
}

function sloSpreads(mine: readonly PolicyResult[], round: (x: number) => number): PolicySeeds["ttftSlo"] {
  const at = (shares: (p: PolicyResult) => number[] | undefined) =>
    SLO_TTFT_MS.map((_, i) => spread(mine.map((p) => shares(p)?.[i] ?? null), round));
  const complete = (s: Array<Spread | null>): s is Spread[] => s.every((x) => x !== null);
  const all = at((p) => p.ttftSlo?.all);
  const byClass: PolicySeeds["ttftSlo"]["byClass"] = {};
  for (const c of PRIORITIES) {
    const s = at((p) => p.ttftSlo?.byClass[c]);
    if (complete(s)) byClass[c] = s;
  }
  return { all: complete(all) ? all : [], byClass };
}

/** `runs`: one scenario's results, one per seed, each with the same policies. */
export function summariseSeeds(runs: readonly ScenarioResult[]): SeedsSummary {
  const first = runs[0];
  return {
    scenario: first.scenario,
    description: first.description,
    mode: first.mode,
    seeds: runs.map((r) => r.seed),
    durationS: first.durationS,
    requests: runs.map((r) => r.offered.requests),
    policies: first.policies.map((p) => summarisePolicy(p.policy, runs)),
  };
}
