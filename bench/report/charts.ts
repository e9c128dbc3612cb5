// SVG charts of one scenario's results: Vega-Lite specs compiled to Vega
// and rendered headless (no canvas, no browser).
import * as vega from "vega";
import { compile, type TopLevelSpec } from "vega-lite";
import { WINDOW_S } from "../admission.js";
import type { ScenarioResult } from "../types.js";

const WIDTH = 640;
const HEIGHT = 340;

export async function render(spec: TopLevelSpec): Promise<string> {
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: "none" });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

function subtitle(r: ScenarioResult): string {
  return `${r.mode} mode, seed ${r.seed}, ${r.durationS} s of arrivals, ${r.offered.requests} requests`;
}

// Baselines in muted colours, ours in strong blues, the reference and the oracle apart.
const COLORS: Record<string, string> = {
  "round-robin": "#7f7f7f",
  random: "#c7c7c7",
  "least-request": "#8c564b",
  reference: "#ff7f0e",
  oracle: "#9467bd",
};
const OURS_COLORS = ["#1f4eb4", "#2ca02c", "#17becf", "#6baed6"];

function policyColor(r: ScenarioResult) {
  const names = r.policies.map((p) => p.policy);
  let ours = 0;
  const range = names.map((n) => COLORS[n] ?? OURS_COLORS[ours++ % OURS_COLORS.length]);
  return {
    field: "policy",
    type: "nominal" as const,
    sort: names,
    scale: { domain: names, range },
    legend: { title: "policy", orient: "right" as const, labelLimit: 260 },
  };
}

/** One line per policy through `values`: the chart's title after the scenario's name, the run's subtitle (and `more`). */
function lineChart(r: ScenarioResult, title: string, more: string, values: object[], mark: object, x: object, y: object): Promise<string> {
  return render({
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title: { text: `${r.scenario}: ${title}`, subtitle: `${subtitle(r)}${more}` },
    width: WIDTH,
    height: HEIGHT,
    background: "white",
    data: { values },
    mark,
    encoding: { x, y, color: policyColor(r) },
  } as TopLevelSpec);
}

/** Fraction of completed requests with TTFT at or below x, one line per policy; log x. */
export function ttftCdfChart(r: ScenarioResult): Promise<string> {
  const values = r.policies.flatMap((p) => p.ttftCdf.filter(([ms]) => ms > 0).map(([ms, q]) => ({ policy: p.policy, ms, q })));
  return lineChart(r, "TTFT distribution", "", values, { type: "line", interpolate: "step-after", strokeWidth: 1.6 },
    { field: "ms", type: "quantitative", scale: { type: "log" }, title: "time to first token (ms, log scale)" },
    { field: "q", type: "quantitative", title: "fraction of requests", scale: { domain: [0, 1] } });
}

/** p95 TTFT per arrival window, one line per policy; log y. */
export function ttftTimelineChart(r: ScenarioResult): Promise<string> {
  const values = r.policies.flatMap((p) => p.ttftTimeline.filter((w) => w.p95 > 0).map((w) => ({ policy: p.policy, t: w.t, p95: w.p95 })));
  return lineChart(r, "p95 TTFT over time", "; by arrival window", values, { type: "line", strokeWidth: 1.4 },
    { field: "t", type: "quantitative", title: "arrival time (s)" },
    { field: "p95", type: "quantitative", scale: { type: "log" }, title: "p95 time to first token (ms, log scale)" });
}

/** Policies the admission chart compares: ours (with and without admission), the baseline and the yardstick. */
const ADMISSION_CHART_POLICIES = (name: string) => name.startsWith("ours:") || name === "round-robin" || name === "oracle";

/**
 * Two panels on one time axis: p95 TTFT from first arrival per 5-s window
 * (log y), and 429s per second; the load step shaded. One line per policy.
 */
export function admissionTimelineChart(r: ScenarioResult): Promise<string> {
  const shown = r.policies.filter((p) => ADMISSION_CHART_POLICIES(p.policy));
  const chartResult = { ...r, policies: shown };
  const latency = shown.flatMap((p) => p.admission.windows.filter((w) => w.p95 > 0).map((w) => ({ policy: p.policy, t: w.t, p95: w.p95 })));
  // Every second of the run, zeros included, so a policy that never refuses draws its flat line.
  const seconds = Math.ceil(Math.max(r.durationS, ...shown.flatMap((p) => p.admission.refusalsPerS.map((x) => x.t + 1))));
  const refusals = shown.flatMap((p) => {
    const n = new Array<number>(seconds).fill(0);
    for (const x of p.admission.refusalsPerS) n[x.t] = x.n;
    return n.map((count, t) => ({ policy: p.policy, t, count }));
  });
  const step = shown.find((p) => p.admission.step)?.admission.step;
  const shade = step ? [{ mark: { type: "rect" as const, color: "#f2f2f2" }, data: { values: [{ from: step.stepStartS, to: step.stepEndS }] }, encoding: { x: { field: "from", type: "quantitative" as const }, x2: { field: "to" } } }] : [];
  const x = { field: "t", type: "quantitative" as const, title: "arrival time (s)", scale: { domain: [0, seconds] } };
  return render({
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title: { text: `${r.scenario}: p95 TTFT from first arrival and 429s over time`, subtitle: `${subtitle(r)}; the load step shaded` },
    background: "white",
    vconcat: [
      {
        width: WIDTH,
        height: HEIGHT * 0.7,
        layer: [
          ...shade,
          {
            data: { values: latency },
            mark: { type: "line", strokeWidth: 1.4 },
            encoding: {
              x,
              y: { field: "p95", type: "quantitative", scale: { type: "log" }, title: `p95 TTFT from first arrival per ${WINDOW_S} s (ms, log)` },
              color: policyColor(chartResult),
            },
          },
        ],
      },
      {
        width: WIDTH,
        height: HEIGHT * 0.45,
        layer: [
          ...shade,
          {
            data: { values: refusals },
            mark: { type: "line", strokeWidth: 1.2, interpolate: "step-after" },
            encoding: {
              x,
              // A run with no 429 at all still gets a readable axis.
              y: { field: "count", type: "quantitative", title: "429s per second (all attempts)", scale: { domain: [0, Math.max(1, ...refusals.map((x) => x.count))] }, axis: { format: "d" } },
              color: policyColor(chartResult),
            },
          },
        ],
      },
    ],
  } as TopLevelSpec);
}
