// `npm run bench -- ...`: runs scenarios (sim or live mode), the filter
// overhead benchmark and the failover benchmark, prints the tables, writes
// results and charts, and with --all refreshes the committed charts and BENCHMARKS.md.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { projectRoot } from "../host/paths.js";
import { replaceBlock, scenarioBlock, scenarioKey } from "./report/benchmarks-md.js";
import { publishCharts, writeJson, writeScenarioOutputs } from "./report/outputs.js";
import { consoleTable, resultsTable } from "./report/table.js";
import { listScenarios, loadScenario, ScenarioError } from "./scenario.js";
import { selectPolicies } from "./policies/index.js";
import { runLive } from "./live/index.js";
import { runSim } from "./sim/simulator.js";
import type { Mode, RunOptions, ScenarioResult } from "./types.js";

const USAGE = `usage: npm run bench -- [options]
  --scenario NAME|PATH  run one scenario (a name from bench/scenarios/, or a file); repeatable
  --all                 run every scenario in bench/scenarios/; refreshes bench/charts/ and BENCHMARKS.md
  --mode sim|live       sim: discrete-event simulation in virtual time (default); live: real Envoy and fake fleet
  --seed N              override the scenario's seed (or the failover bench's arrivals)
  --duration S          override the scenario's duration (seconds of arrivals)
  --policies A,B        run only these policies
  --json FILE           also write the result(s) to FILE
  --out DIR             results folder (default bench/results); each scenario writes DIR/<scenario>/
  --overhead            run the filter-overhead benchmark too (alone if no scenario is given)
  --failover            run the failover benchmark too (alone if no scenario is given): client errors when a pod
                        dies, answers 500, or dies after the aggregator; writes DIR/failover/ and BENCHMARKS.md
  --smoke               a short run for CI: every scenario (or the given ones) for a few seconds, or a shortened
                        overhead or failover bench; no BENCHMARKS.md update
  --help`;

/** Seconds of arrivals per scenario in a smoke run. */
export const SMOKE_DURATION_S = 10;

export interface Io {
  out: (text: string) => void;
  err: (text: string) => void;
  /** Whether `err` is a terminal (progress is then redrawn in place). */
  errIsTty: boolean;
}

const defaultIo: Io = {
  out: (t) => process.stdout.write(t),
  err: (t) => process.stderr.write(t),
  errIsTty: process.stderr.isTTY === true,
};

class UsageError extends Error {}

interface Args {
  scenarios: string[];
  mode: Mode;
  seed?: number;
  durationS?: number;
  policies?: string[];
  json?: string;
  outDir: string;
  overhead: boolean;
  failover: boolean;
  smoke: boolean;
  all: boolean;
}

function parse(argv: string[]): Args | "help" {
  const { values } = parseArgs({
    args: argv,
    options: {
      scenario: { type: "string", multiple: true },
      all: { type: "boolean" },
      mode: { type: "string" },
      seed: { type: "string" },
      duration: { type: "string" },
      policies: { type: "string" },
      json: { type: "string" },
      out: { type: "string" },
      overhead: { type: "boolean" },
      failover: { type: "boolean" },
      smoke: { type: "boolean" },
      help: { type: "boolean" },
    },
    strict: true,
  });
  if (values.help) return "help";
  const mode = values.mode ?? "sim";
  if (mode !== "sim" && mode !== "live") throw new UsageError(`--mode: expected sim or live, got ${JSON.stringify(mode)}`);
  let seed: number | undefined;
  if (values.seed !== undefined) {
    seed = Number(values.seed);
    if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new UsageError(`--seed: expected an integer 0..4294967295, got ${JSON.stringify(values.seed)}`);
  }
  let durationS: number | undefined;
  if (values.duration !== undefined) {
    durationS = Number(values.duration);
    if (!(durationS > 0)) throw new UsageError(`--duration: expected seconds > 0, got ${JSON.stringify(values.duration)}`);
  }
  const all = values.all ?? false;
  const smoke = values.smoke ?? false;
  const overhead = values.overhead ?? false;
  const failover = values.failover ?? false;
  let scenarios = values.scenario ?? [];
  if (all && scenarios.length > 0) throw new UsageError("--all and --scenario exclude each other");
  if (all || (smoke && scenarios.length === 0 && !overhead && !failover)) scenarios = listScenarios();
  if (scenarios.length === 0 && !overhead && !failover) {
    throw new UsageError("nothing to run: give --scenario NAME, --all, --smoke, --overhead or --failover");
  }
  const policies = values.policies?.split(",").map((p) => p.trim()).filter((p) => p !== "");
  try {
    selectPolicies(policies);
  } catch (err) {
    throw new UsageError(`--policies: ${(err as Error).message}`);
  }
  return {
    scenarios,
    mode,
    seed,
    durationS: durationS ?? (smoke ? SMOKE_DURATION_S : undefined),
    policies,
    json: values.json,
    outDir: values.out ?? join(projectRoot, "bench", "results"),
    overhead,
    failover,
    smoke,
    all,
  };
}

/** Percent of virtual time per policy: redrawn in place on a terminal, every 25% otherwise. */
function progressReporter(io: Io, scenario: string): (policy: string, fraction: number) => void {
  let lastQuarter = -1;
  let started = Date.now();
  return (policy, fraction) => {
    const pct = Math.floor(fraction * 100);
    const label = `[${scenario}] ${policy.padEnd(14)} ${String(pct).padStart(3)}%`;
    if (fraction >= 1) {
      io.err(`${io.errIsTty ? "\r\x1b[K" : ""}${label} in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
      started = Date.now();
      lastQuarter = -1;
    } else if (io.errIsTty) {
      io.err(`\r\x1b[K${label}`);
    } else if (Math.floor(pct / 25) > lastQuarter) {
      lastQuarter = Math.floor(pct / 25);
      io.err(`${label}\n`);
    }
  };
}

/** Live results are kept apart from simulated ones: `heterogeneous-live`. */
function resultName(r: ScenarioResult): string {
  return r.mode === "live" ? `${r.scenario}-live` : r.scenario;
}

/** The command line as a user would type it, for the record in BENCHMARKS.md. */
function commandLine(argv: string[]): string {
  return ["npm run bench --", ...argv.map((a) => (/^[\w./:=,-]+$/.test(a) ? a : JSON.stringify(a)))].join(" ");
}

async function runScenarios(args: Args, argv: string[], io: Io): Promise<void> {
  const results: ScenarioResult[] = [];
  const benchmarksPath = join(projectRoot, "BENCHMARKS.md");
  const chartDir = join(projectRoot, "bench", "charts");
  const updateDocs = args.all && !args.smoke;
  let doc = updateDocs ? readFileSync(benchmarksPath, "utf8") : "";

  for (const name of args.scenarios) {
    const scenario = loadScenario(name);
    const opts: RunOptions = { seed: args.seed, durationS: args.durationS, policies: args.policies, onProgress: progressReporter(io, scenario.name) };
    const result = args.mode === "live" ? await runLive(scenario, opts) : await runSim(scenario, opts);
    results.push(result);
    const dir = join(args.outDir, resultName(result));
    const charts = await writeScenarioOutputs(result, dir);
    io.out(`\n${result.scenario} (${result.mode}, seed ${result.seed}, ${result.durationS} s, ${result.offered.requests} requests)\n`);
    io.out(`${consoleTable(resultsTable(result))}\n`);
    io.out(`results: ${relative(process.cwd(), dir) || "."}/\n`);
    if (updateDocs) {
      const names = publishCharts(resultName(result), charts, chartDir);
      const rel = (f: string) => relative(projectRoot, join(chartDir, f));
      const heading = `### ${result.scenario}${result.mode === "live" ? " (live)" : ""}`;
      doc = replaceBlock(doc, scenarioKey(result), scenarioBlock(result, { cdf: rel(names.cdf), timeline: rel(names.timeline) }, commandLine(argv)), heading);
    }
  }
  if (args.json) writeJson(args.json, results.length === 1 ? results[0] : { results });
  if (updateDocs) {
    writeFileSync(benchmarksPath, doc);
    io.out(`updated ${relative(process.cwd(), benchmarksPath)} and ${relative(process.cwd(), chartDir)}/\n`);
  }
}

async function runOverheadBench(args: Args, argv: string[], io: Io): Promise<void> {
  const { runOverhead, overheadMarkdown } = await import("./overhead/index.js");
  const report = await runOverhead({
    onProgress: (line) => io.err(`[overhead] ${line}\n`),
    // A smoke run only proves the pipeline works end to end.
    ...(args.smoke ? { durationS: 1, bodySizes: [4096], endpointCounts: [8] } : {}),
  });
  const markdown = overheadMarkdown(report);
  const dir = join(args.outDir, "overhead");
  mkdirSync(dir, { recursive: true });
  writeJson(join(dir, "overhead.json"), report);
  io.out(`\n${markdown}\n`);
  if (!args.smoke) {
    const path = join(projectRoot, "BENCHMARKS.md");
    writeFileSync(path, replaceBlock(readFileSync(path, "utf8"), "overhead", markdown));
    io.out(`updated ${relative(process.cwd(), path)} (overhead section; ${commandLine(argv)})\n`);
  }
}

async function runFailoverBench(args: Args, argv: string[], io: Io): Promise<void> {
  const { runFailover, failoverMarkdown } = await import("./failover/index.js");
  const dir = join(args.outDir, "failover");
  mkdirSync(dir, { recursive: true });
  const report = await runFailover({
    smoke: args.smoke,
    seed: args.seed,
    logDir: dir,
    command: commandLine(argv),
    onProgress: (line) => io.err(`[failover] ${line}\n`),
  });
  const markdown = failoverMarkdown(report);
  writeJson(join(dir, "failover.json"), report);
  io.out(`\n${markdown}\nresults: ${relative(process.cwd(), dir) || "."}/\n`);
  if (!args.smoke) {
    const path = join(projectRoot, "BENCHMARKS.md");
    writeFileSync(path, replaceBlock(readFileSync(path, "utf8"), "failover", markdown, "## Failover"));
    io.out(`updated ${relative(process.cwd(), path)} (failover section; ${report.command})\n`);
  }
}

/** Runs the command; returns the exit code. */
export async function runBench(argv: string[], io: Io = defaultIo): Promise<number> {
  try {
    const args = parse(argv);
    if (args === "help") {
      io.out(`${USAGE}\n`);
      return 0;
    }
    if (args.scenarios.length > 0) await runScenarios(args, argv, io);
    if (args.overhead) await runOverheadBench(args, argv, io);
    if (args.failover) await runFailoverBench(args, argv, io);
    return 0;
  } catch (err) {
    if (err instanceof ScenarioError) {
      io.err(`${err.message}\n`);
      return 1;
    }
    if (err instanceof UsageError || (err as NodeJS.ErrnoException).code?.startsWith("ERR_PARSE_ARGS")) {
      io.err(`${(err as Error).message}\n${err instanceof UsageError ? "" : `${USAGE}\n`}`);
      return 2;
    }
    throw err;
  }
}
