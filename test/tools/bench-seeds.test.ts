// Several seeds per scenario: the summary's figures, the CLI's --seeds and
// --all defaults, and the worker pool giving the same results as in-process runs.
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ALL_SEEDS, parse, type Args } from "../../bench/cli.js";
import { runBench } from "../../bench/command.js";
import { onOffTable, type OnOffRow } from "../../bench/report/admission-table.js";
import { ON_OFF_BLOCK, withScenarioRows } from "../../bench/report/benchmarks-md.js";
import { parseScenario } from "../../bench/scenario.js";
import { summariseSeeds, type SeedsSummary } from "../../bench/seeds.js";
import { runSim } from "../../bench/sim/simulator.js";
import { relativeChange } from "../../bench/stats.js";
import type { ScenarioResult } from "../../bench/types.js";

const SMALL = parseScenario(
  `
durationS: 15
models: [{ name: m }]
fleet:
  - { name: fast, model: m, count: 2, speed: 1.0 }
  - { name: slow, model: m, count: 1, speed: 0.35 }
arrivals: { pattern: poisson, rate: 6 }
prompt: { dist: lognormal, median: 300, sigma: 0.5, min: 16, max: 1500 }
output: { dist: lognormal, median: 60, sigma: 0.5, min: 4, max: 300 }
`,
  "small",
  "small",
);

const quiet = () => {
  const out: string[] = [];
  const err: string[] = [];
  return { out, err, io: { out: (t: string) => out.push(t), err: (t: string) => err.push(t), errIsTty: false } };
};

describe("bench seeds", () => {
  it("summarises each policy over the seeds: mean, range, each seed's p95, and the range of per-seed changes", async () => {
    const policies = ["round-robin", "least-request"];
    const runs = [await runSim(SMALL, { seed: 1, policies }), await runSim(SMALL, { seed: 2, policies }), await runSim(SMALL, { seed: 3, policies })];
    const s = summariseSeeds(runs);
    expect(s).toMatchObject({ scenario: "small", seeds: [1, 2, 3], requests: runs.map((r) => r.offered.requests) });
    const lr = s.policies[1];
    const p95s = runs.map((r) => r.policies[1].ttftMs!.p95);
    expect(lr.ttftP95BySeed).toEqual(p95s);
    expect(lr.ttftMs!.p95.min).toBe(Math.min(...p95s));
    expect(lr.ttftMs!.p95.max).toBe(Math.max(...p95s));
    expect(lr.ttftMs!.p95.mean).toBeCloseTo(p95s.reduce((a, b) => a + b) / 3, 3);
    const changes = runs.map((r) => relativeChange(r.policies[1].ttftMs!.p95, r.policies[0].ttftMs!.p95)!);
    expect(lr.vsBaseline!.ttftP95.min).toBeCloseTo(Math.min(...changes), 3);
    expect(lr.vsBaseline!.ttftP95.max).toBeCloseTo(Math.max(...changes), 3);
    expect(s.policies[0].vsBaseline).toBeNull();
    expect(Object.values(lr.podShare).reduce((a, b) => a + b)).toBeCloseTo(1, 2);
  });

  it("--all runs seeds 1, 2 and 3 in sim mode unless told otherwise; --seed and --seeds are checked", async () => {
    const seedsOf = (argv: string[]) => (parse(argv) as Args).seeds;
    expect(seedsOf(["--all"])).toEqual(ALL_SEEDS);
    expect(ALL_SEEDS).toEqual([1, 2, 3]);
    expect(seedsOf(["--all", "--seed", "5"])).toEqual([5]);
    expect(seedsOf(["--all", "--mode", "live"])).toBeUndefined();
    expect(seedsOf(["--all", "--smoke"])).toBeUndefined();
    expect(seedsOf(["--scenario", "bursty", "--seeds", "4,9"])).toEqual([4, 9]);
    const { err, io } = quiet();
    expect(await runBench(["--scenario", "bursty", "--seed", "1", "--seeds", "1,2"], io)).toBe(2);
    expect(await runBench(["--scenario", "bursty", "--seeds", "1,x"], io)).toBe(2);
    expect(await runBench(["--scenario", "bursty", "--seeds", "2,2"], io)).toBe(2);
    expect(await runBench(["--scenario", "bursty", "--jobs", "0"], io)).toBe(2);
    expect(err.join("")).toMatch(/exclude each other[\s\S]*--seeds: expected integers[\s\S]*repeated[\s\S]*--jobs: expected an integer >= 1/);
  });

  it("--update-md refreshes the given scenarios' sections on seeds 1-3 by default, in sim mode only", () => {
    expect(parse(["--scenario", "overload", "--update-md"])).toMatchObject({ scenarios: ["overload"], updateMd: true, seeds: [1, 2, 3] });
    expect(parse(["--scenario", "overload", "--update-md", "--seeds", "4"])).toMatchObject({ seeds: [4] });
    expect(parse(["--scenario", "overload"])).toMatchObject({ updateMd: false });
    expect(() => parse(["--all", "--update-md"])).toThrow(/--update-md: needs --scenario/);
    expect(() => parse(["--scenario", "overload", "--update-md", "--smoke"])).toThrow(/--update-md/);
    expect(() => parse(["--mode", "live", "--scenario", "overload", "--update-md"])).toThrow(/in sim mode/);
  });

  it("--update-md refreshes only its scenarios' rows of the admission summary, keeping the others and the table's source", () => {
    const row = (scenario: string, refused: number): OnOffRow => ({
      scenario, policy: "ours:default", refusedWith: [refused], refusedWithout: [0], p50: [0], p95: [0], p99: [0], requestsPerS: [0],
    });
    const withOnOffRows = (doc: string, rows: OnOffRow[], command: string, every: boolean) => withScenarioRows(doc, ON_OFF_BLOCK, onOffTable(rows), command, every);
    const all = withOnOffRows("# B\n", [row("bursty", 0), row("overload", 5)], "npm run bench -- --all", true);
    const some = withOnOffRows(all, [row("overload", 7), row("flash-crowd", 9)], "npm run bench -- --scenario overload --update-md", false);
    const lines = some.split("\n").filter((l) => l.startsWith("| ") && !l.startsWith("| scenario") && !l.startsWith("| ---"));
    expect(lines.map((l) => l.split("|").slice(1, 4).map((c) => c.trim()))).toEqual([
      ["bursty", "ours:default", "0"], ["flash-crowd", "ours:default", "9"], ["overload", "ours:default", "7"],
    ]);
    expect(some).toContain("Produced by `npm run bench -- --all`; the overload, flash-crowd rows by `npm run bench -- --scenario overload --update-md`.");
    // A second refresh names only its own command after the whole table's.
    const again = withOnOffRows(some, [row("overload", 8)], "X", false);
    expect(again).toContain("Produced by `npm run bench -- --all`; the overload rows by `X`.");
  });

  it("one command runs the scale and soak benchmarks too, each alone, with its own options checked", async () => {
    expect(parse(["--soak", "--minutes", "2", "--rate", "5", "--seed", "7", "--out", "x"])).toMatchObject({ soak: { minutes: 2, ratePerS: 5 }, seeds: [7], outDir: "x" });
    expect(parse(["--soak"])).toMatchObject({ soak: { minutes: 1, ratePerS: 30 }, seeds: [1] });
    expect(parse(["--scale", "--sizes", "10,20", "--duration", "3"])).toMatchObject({ scale: { sizes: [10, 20] }, durationS: 3 });
    const { err, io } = quiet();
    expect(await runBench(["--soak", "--minutes", "1.5"], io)).toBe(2);
    expect(await runBench(["--soak", "--scale"], io)).toBe(2);
    expect(await runBench(["--scale", "--scenario", "bursty"], io)).toBe(2);
    expect(await runBench(["--scale", "--sizes", "0"], io)).toBe(2);
    expect(await runBench(["--scenario", "bursty", "--minutes", "2"], io)).toBe(2);
    expect(err.join("")).toMatch(/whole number of minutes[\s\S]*exclude each other[\s\S]*runs alone: drop --scenario[\s\S]*--sizes: expected integers[\s\S]*only with --soak/);
  });

  it("CLI --seeds writes each seed's result, the summary and one table", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bench-seeds-"));
    const json = join(dir, "out.json");
    const { out, err, io } = quiet();
    const argv = ["--smoke", "--scenario", "uniform-steady", "--seeds", "1,2", "--policies", "round-robin,oracle", "--out", dir, "--json", json];
    expect(await runBench(argv, io), err.join("")).toBe(0);
    const written = JSON.parse(readFileSync(json, "utf8")) as { summary: SeedsSummary; results: ScenarioResult[] };
    expect(written.summary.seeds).toEqual([1, 2]);
    expect(written.results.map((r) => r.seed)).toEqual([1, 2]);
    const seed2 = JSON.parse(readFileSync(join(dir, "uniform-steady", "seed-2", "result.json"), "utf8")) as ScenarioResult;
    expect(seed2).toEqual(written.results[1]);
    expect(JSON.parse(readFileSync(join(dir, "uniform-steady", "seeds.json"), "utf8"))).toEqual(written.summary);
    expect(existsSync(join(dir, "uniform-steady", "ttft-cdf.svg"))).toBe(true);
    expect(out.join("")).toContain("TTFT p95, seed 1 / 2");
    expect(err.join("")).toContain("[uniform-steady seed 2] oracle");
  });

  it("runs jobs in worker threads with the same results as in-process (compiled build)", async () => {
    const pool = (await import("../../dist/bench/sim/pool.js")) as typeof import("../../bench/sim/pool.js");
    expect(pool.canUseWorkers()).toBe(true);
    const policies = ["round-robin", "ours:default"];
    const progress = new Set<number>();
    const jobs = [1, 2].map((seed) => ({ scenario: SMALL, opts: { seed, policies } }));
    const results = await Promise.all(pool.startSimJobs(jobs, 2, (job, _policy, fraction) => fraction >= 1 && progress.add(job)));
    expect([...progress].sort()).toEqual([0, 1]);
    for (const [i, seed] of [1, 2].entries()) expect(results[i]).toEqual(await runSim(SMALL, { seed, policies }));
  });
});
