// SVG charts of one scenario's results: Vega-Lite specs compiled to Vega
// and rendered headless (no canvas, no browser).
import * as vega from "vega";
import { compile, type TopLevelSpec } from "vega-lite";
import type { ScenarioResult } from "../types.js";

const WIDTH = 640;
const HEIGHT = 340;

async function render(spec: TopLevelSpec): Promise<string> {
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
    legend: { title: "policy", orient: "right" as const },
  };
}

/** Fraction of completed requests with TTFT at or below x, one line per policy; log x. */
export function ttftCdfChart(r: ScenarioResult): Promise<string> {
  const values = r.policies.flatMap((p) => p.ttftCdf.filter(([ms]) => ms > 0).map(([ms, q]) => ({ policy: p.policy, ms, q })));
  return render({
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title: { text: `${r.scenario}: TTFT distribution`, subtitle: subtitle(r) },
    width: WIDTH,
    height: HEIGHT,
    background: "white",
    data: { values },
    mark: { type: "line", interpolate: "step-after", strokeWidth: 1.6 },
    encoding: {
      x: { field: "ms", type: "quantitative", scale: { type: "log" }, title: "time to first token (ms, log scale)" },
      y: { field: "q", type: "quantitative", title: "fraction of requests", scale: { domain: [0, 1] } },
      color: policyColor(r),
    },
  });
}

/** p95 TTFT per arrival window, one line per policy; log y. */
export function ttftTimelineChart(r: ScenarioResult): Promise<string> {
  const values = r.policies.flatMap((p) => p.ttftTimeline.filter((w) => w.p95 > 0).map((w) => ({ policy: p.policy, t: w.t, p95: w.p95 })));
  return render({
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title: { text: `${r.scenario}: p95 TTFT over time`, subtitle: `${subtitle(r)}; by arrival window` },
    width: WIDTH,
    height: HEIGHT,
    background: "white",
    data: { values },
    mark: { type: "line", strokeWidth: 1.4 },
    encoding: {
      x: { field: "t", type: "quantitative", title: "arrival time (s)" },
      y: { field: "p95", type: "quantitative", scale: { type: "log" }, title: "p95 time to first token (ms, log scale)" },
      color: policyColor(r),
    },
  });
}
