// BENCHMARKS.md's scenario blocks and the live runs' shared table: what the
// generators write for a small fake result, and that the committed blocks
// (converted by hand when each form came in) keep the same shape, so a rerun
// changes numbers only.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { liveAdmissionBlock, liveAdmissionTable, liveBlock, liveTable, replaceBlock, scenarioBlock, withScenarioRows } from "../../bench/report/benchmarks-md.js";
import type { AdmissionSummary, ClassCounts } from "../../bench/admission.js";
import type { LatencySummary, PolicyResult, Priority, ScenarioResult } from "../../bench/types.js";

const root = fileURLToPath(new URL("../..", import.meta.url));

const latency = (p95: number): LatencySummary => ({ p50: p95 / 3, p95, p99: p95 * 1.5, mean: p95 / 2, max: p95 * 2 });
const counts = (requests: number, refused = 0): ClassCounts => ({ requests, refused, retried: refused, retriedCompleted: refused, finalRefused: 0 });

function admission(byClass: Record<Priority, ClassCounts>): AdmissionSummary {
  const refused = Object.values(byClass).reduce((s, c) => s + c.refused, 0);
  return {
    byClass,
    total: counts(100, refused),
    retrySuccess: refused > 0 ? 1 : null,
    criticalWhileSheddable: 0,
    retryAfterS: null,
    retriedTtftMs: null,
    ttftByClass: { critical: null, standard: null, sheddable: null },
    windows: [],
    refusalsPerS: [],
    step: null,
  };
}

/** One policy's result: `p95` ms TTFT; with `classes`, a third of the requests Critical, a third Sheddable, and `refused` of them refused. */
function policy(name: string, p95: number, classes: boolean, refused = 0): PolicyResult {
  const byClass = classes
    ? { critical: counts(33), standard: counts(34), sheddable: counts(33, refused) }
    : { critical: counts(0), standard: counts(100), sheddable: counts(0) };
  return {
    policy: name,
    description: name,
    requests: 100,
    completed: 100,
    completedShare: 1,
    firstRefusedShare: refused / 100,
    timeouts: 0,
    errors: 0,
    errorsByReason: {},
    ttftMs: latency(p95),
    e2eMs: latency(p95 * 10),
    throughput: { requestsPerS: 1.5, outputTokensPerS: 150 },
    perPod: { "gpu-0": 50, "gpu-1": 50 },
    podShare: { "gpu-0": 0.5, "gpu-1": 0.5 },
    prefixHitRate: 0,
    serverCacheReuse: null,
    preemptions: 0,
    adapterLoads: 0,
    adapterLoadsPer1k: 0,
    ttftCdf: [],
    ttftTimeline: [],
    admission: admission(byClass),
    ttftSlo: { all: [0.9, 0.95, 1, 1], byClass: classes ? { critical: [1, 1, 1, 1], standard: [0.9, 1, 1, 1], sheddable: [0.5, 0.6, 0.7, 0.8] } : { standard: [0.9, 0.95, 1, 1] } },
  };
}

function fake(seed: number, opts: { mode?: "sim" | "live"; classes?: boolean; refused?: number } = {}): ScenarioResult {
  const classes = opts.classes ?? false;
  return {
    scenario: "tiny",
    description: "Two pods, steady traffic",
    mode: opts.mode ?? "sim",
    seed,
    durationS: 60,
    offered: { requests: 100 + seed, ratePerS: 1.667, meanPromptTokens: 500, meanOutputTokens: 100 },
    fleet: [
      { pod: "gpu-0", model: "m", speed: 1 },
      { pod: "gpu-1", model: "m", speed: 1 },
    ],
    policies: [policy("round-robin", 900 + seed, classes), policy("ours:default", 400 + seed, classes, opts.refused ?? 0)],
  };
}

const CHARTS = { cdf: "bench/charts/tiny-ttft-cdf.svg", timeline: "bench/charts/tiny-ttft-timeline.svg" };
const ADMISSION_CHARTS = { ...CHARTS, admission: "bench/charts/tiny-admission-timeline.svg" };

/** The line kinds a block is made of. */
function shape(content: string): string[] {
  return content.split("\n").map((line) => {
    if (line === "") return "blank";
    if (/^\*\*Simulated\*\*, seeds? [\d, ]+\. .+ Fleet: .+\. Offered.+ tokens\.( Requests with [^.]+\.)? By `[^`]+`\.( No policy refused a request\.)?$/.test(line)) return "head";
    if (/^(!\[[^\]]+\]\([^)\s]+\.svg\) ?){2,3}$/.test(line)) return "charts";
    if (line.startsWith("| ")) return "row";
    if (/^(SLO goodput by class, [A-Z][a-z]+( \/ [A-Z][a-z]+)* \(|Admission, each seed's value \(seed|Admission \(seed)/.test(line)) return "caption";
    return `other: ${line.slice(0, 60)}`;
  });
}

const committedBlocks = () =>
  [...readFileSync(join(root, "BENCHMARKS.md"), "utf8").matchAll(/<!-- (scenario:[\w-]+):start -->\n([\s\S]*?)\n<!-- \1:end -->/g)].map((m) => ({ key: m[1], content: m[2] }));

describe("BENCHMARKS.md scenario blocks", () => {
  it("several seeds: one head line with the command, the charts, then the table; nothing said in every block", () => {
    const runs = [fake(1), fake(2)];
    const block = scenarioBlock(runs, CHARTS, "npm run bench -- --all");
    const lines = block.split("\n");
    expect(lines[0]).toBe(
      "**Simulated**, seeds 1, 2. Two pods, steady traffic. Fleet: 2 × gpu (m, speed 1.0). Offered with seed 1: 101 requests over 60 s (1.667 req/s), " +
        "mean prompt 500 tokens, mean output 100 tokens. Requests with seed 2 102. By `npm run bench -- --all`.",
    );
    expect(lines[1]).toBe("![tiny: TTFT distribution](bench/charts/tiny-ttft-cdf.svg) ![tiny: p95 TTFT over time](bench/charts/tiny-ttft-timeline.svg)");
    expect(lines[3]).toMatch(/^\| policy \| TTFT ≤ 2 s \| TTFT ≤ 5 s \| TTFT ≤ 10 s \| TTFT ≤ 30 s \| completed \|/);
    expect(lines.find((l) => l.startsWith("| ours:default |"))).toContain("| ours:default | 90% | 95% | 100% | 100% | 100% | 0 |");
    expect(block).not.toMatch(/Produced by|Each cell|<details>|with admission against without/);
    expect(shape(block)).toEqual(["head", "charts", "blank", ...Array(4).fill("row")]);
  });

  it("classes and refusals: goodput by class, one row per policy, and the admission table", () => {
    const runs = [fake(1, { classes: true, refused: 10 }), fake(2, { classes: true, refused: 12 })];
    const lines = scenarioBlock(runs, ADMISSION_CHARTS, "X").split("\n");
    expect(lines[1]).toContain("![tiny: p95 TTFT from first arrival and 429s over time](bench/charts/tiny-admission-timeline.svg)");
    expect(lines).toContain("SLO goodput by class, Critical / Standard / Sheddable (of each class's own requests; mean over the seeds):");
    expect(lines).toContain("| ours:default | 100% / 90% / 50% | 100% / 100% / 60% | 100% / 100% / 70% | 100% / 100% / 80% |");
    expect(lines).toContain("Admission, each seed's value (seed 1 / 2):");
    expect(lines.find((l) => l.startsWith("| ours:default | 10 (10%) / 12 (12%) |"))).toBeDefined();
  });

  it("classes without a refusal, one seed: the head line says so, goodput by class follows and no admission table", () => {
    const r = fake(1, { classes: true });
    const block = scenarioBlock([r], ADMISSION_CHARTS, "npm run bench -- --scenario tiny --seed 1 --update-md");
    expect(block.split("\n")[0]).toMatch(/^\*\*Simulated\*\*, seed 1\. .* Offered: 101 requests .* By `npm run bench -- --scenario tiny --seed 1 --update-md`\. No policy refused a request\.$/);
    expect(block).not.toContain("429s (first attempts)");
    expect(shape(block)).toEqual(["head", "charts", "blank", ...Array(4).fill("row"), "blank", "caption", "blank", ...Array(4).fill("row")]);
  });

  it("ours and its admission-off twin share a row where every cell matches, and keep their own rows where not", () => {
    const twins = (offP95: number) => {
      const r = fake(1);
      r.policies.push({ ...policy("ours:default", 401, false), policy: "ours:default:no-admission", ttftMs: latency(offP95) });
      return scenarioBlock([r], CHARTS, "X").split("\n").filter((l) => l.startsWith("| ours"));
    };
    expect(twins(401).map((l) => l.split(" | ")[0])).toEqual(["| ours:default, admission on or off"]);
    expect(twins(450).map((l) => l.split(" | ")[0])).toEqual(["| ours:default", "| ours:default:no-admission"]);
  });

  it("a block keeps a blank line before its end marker, and rewriting it changes nothing else", () => {
    const doc = replaceBlock("# B\n\nbefore\n", "scenario:tiny", "| a |\n| --- |\n| 1 |", "### tiny");
    expect(doc).toBe("# B\n\nbefore\n\n### tiny\n\n<!-- scenario:tiny:start -->\n| a |\n| --- |\n| 1 |\n\n<!-- scenario:tiny:end -->\n");
    expect(replaceBlock(doc, "scenario:tiny", "| a |\n| --- |\n| 1 |")).toBe(doc);
  });

  it("live runs share one table: a scenario's run replaces its rows, keeps the others', and fills a column older rows lack with n/a", () => {
    const run = (scenario: string, seed: number) => ({ ...fake(seed, { mode: "live", classes: true, refused: 5 }), scenario });
    const charts = (s: string) => ({ cdf: `${s}-cdf.svg`, timeline: `${s}-timeline.svg`, admission: `${s}-adm.svg` });
    const write = (doc: string, r: ScenarioResult, every: boolean) =>
      withScenarioRows(withScenarioRows(doc, liveBlock(r), liveTable([r], charts(r.scenario)), "X", every), liveAdmissionBlock(r), liveAdmissionTable([r]), "X", every);
    let doc = write(write("# B\n", run("b", 1), true), run("a", 1), false);
    // An older table without the SLO columns.
    doc = doc.replace(/ \| TTFT ≤ 30 s \|/, " |").replace(/(\| b \|[^\n]*?\| (round-robin|ours:default) \|(?: [^|]+ \|){3}) [^|]+ \|/g, "$1");
    doc = write(doc, run("a", 2), false);
    const rows = doc.split("\n").filter((l) => /^\| [ab] \|/.test(l) && l.includes("(100%)"));
    expect(rows.map((l) => l.split(" | ").slice(0, 4).join(" | "))).toEqual([
      "| a | 102 in 60 s, seed 2 | [CDF](a-cdf.svg) [p95](a-timeline.svg) [429s](a-adm.svg) | round-robin",
      "| a |  |  | ours:default",
      "| b | 101 in 60 s, seed 1 | [CDF](b-cdf.svg) [p95](b-timeline.svg) [429s](b-adm.svg) | round-robin",
      "| b |  |  | ours:default",
    ]);
    expect(rows.filter((l) => l.startsWith("| b ")).every((l) => l.split(" | ")[7] === "n/a")).toBe(true);
    expect(doc.match(/^\| [ab] \| (round-robin|ours:default) \| /gm)).toHaveLength(4);
    expect(doc).toContain("Produced by `X`.");
  });

  it("the committed blocks have the generators' shape", () => {
    const blocks = committedBlocks();
    expect(blocks.length).toBeGreaterThan(12);
    for (const { key, content } of blocks) {
      const kinds = shape(content);
      expect(kinds.filter((k) => k.startsWith("other")), key).toEqual([]);
      expect(kinds.slice(0, 4), key).toEqual(["head", "charts", "blank", "row"]);
      expect(kinds.at(-1), key).toBe("blank");
    }
  });
});
