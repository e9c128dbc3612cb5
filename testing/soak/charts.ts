// The soak's chart, one SVG in three panels on the run's time axis: memory
// (Envoy RSS, aggregator RSS, the filter's Wasm memory) with the events
// marked; requests by outcome per window; and every outcome but ok by kind.
import type { TopLevelSpec } from "vega-lite";
import { render } from "../../bench/report/charts.js";
import { OUTCOMES } from "./classify.js";
import type { SoakResult } from "./index.js";
import { SERIES, SERIES_TITLES } from "./trend.js";

const WIDTH = 640;

const OUTCOME_COLORS: Record<(typeof OUTCOMES)[number], string> = {
  ok: "#9ecae1",
  refused: "#fdae6b",
  expected: "#bdbdbd",
  injected: "#756bb1",
  unexpected: "#d62728",
};
const EVENT_COLORS = { kill: "#d62728", restore: "#2ca02c", join: "#1f77b4", leave: "#7f7f7f" };

export function soakChart(r: SoakResult): Promise<string> {
  const minutes = r.settings.durationMs / 60_000;
  const x = { type: "quantitative" as const, title: "time (min)", scale: { domain: [0, Math.max(minutes, r.elapsedMs / 60_000)] } };
  const memory = r.samples.flatMap((s) =>
    SERIES.flatMap((series) => (s[series] === null ? [] : [{ t: s.tMs / 60_000, series: SERIES_TITLES[series], mb: s[series]! / 2 ** 20 }])),
  );
  const events = r.events.map((e) => ({ t: e.atMs / 60_000, kind: e.kind, label: `${e.kind} ${e.pod}` }));
  const outcomes = r.timeline.flatMap((w) =>
    OUTCOMES.filter((o) => w[o] > 0).map((o) => ({ t: w.tS / 60, tEnd: (w.tS + r.timelineWindowS) / 60, outcome: o, n: w[o] })),
  );
  const kinds = OUTCOMES.filter((o) => o !== "ok").flatMap((o) => Object.entries(r.byKind[o]).map(([kind, n]) => ({ outcome: o, kind, n })));
  const outcomeColor = {
    field: "outcome",
    type: "nominal" as const,
    sort: [...OUTCOMES],
    scale: { domain: [...OUTCOMES], range: OUTCOMES.map((o) => OUTCOME_COLORS[o]) },
  };
  return render({
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title: {
      text: `Soak: ${minutes} min, ${r.requests} requests, ${r.byOutcome.unexpected} unexpected`,
      subtitle: `${r.settings.ratePerS} req/s, seed ${r.settings.seed}; pods killed, restored, joined and left on a ${r.settings.cycle.lengthMs / 1000} s cycle`,
    },
    background: "white",
    resolve: { scale: { color: "independent" } },
    vconcat: [
      {
        width: WIDTH,
        height: 240,
        resolve: { scale: { color: "independent" } },
        layer: [
          {
            data: { values: events },
            mark: { type: "rule", strokeDash: [3, 3], opacity: 0.6 },
            encoding: {
              x: { field: "t", ...x },
              color: {
                field: "kind", type: "nominal", title: "event",
                scale: { domain: Object.keys(EVENT_COLORS), range: Object.values(EVENT_COLORS) },
              },
            },
          },
          {
            data: { values: memory },
            mark: { type: "line", strokeWidth: 1.6, point: { size: 12 } },
            encoding: {
              x: { field: "t", ...x },
              y: { field: "mb", type: "quantitative", title: "memory (MiB)" },
              color: { field: "series", type: "nominal", title: "memory", legend: { labelLimit: 260 }, scale: { range: ["#1f4eb4", "#ff7f0e", "#9467bd"] } },
            },
          },
        ],
      },
      {
        width: WIDTH,
        height: 160,
        data: { values: outcomes },
        mark: { type: "bar", stroke: "white", strokeWidth: 0.5 },
        encoding: {
          x: { field: "t", bin: "binned", ...x, title: `time (min); requests by when they were sent, ${r.timelineWindowS} s windows` },
          x2: { field: "tEnd" },
          y: { field: "n", type: "quantitative", stack: "zero", title: "requests" },
          color: { ...outcomeColor, title: "outcome" },
        },
      },
      {
        width: WIDTH,
        height: { step: 18 },
        data: { values: kinds },
        mark: { type: "bar" },
        encoding: {
          y: { field: "kind", type: "nominal", title: null, sort: "-x", axis: { labelLimit: 360 } },
          x: { field: "n", type: "quantitative", title: "requests (every outcome but ok, by kind)" },
          color: { ...outcomeColor, legend: null },
        },
      },
    ],
  } as TopLevelSpec);
}
