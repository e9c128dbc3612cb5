// `npm run bench -- ...`, the one benchmark command: the parsed arguments
// (cli.ts) pick the modes below, which run in the table's order: scenarios in
// sim or live mode, capacity, replicas, the filter overhead, failover, scale
// and soak. Each prints its tables and writes its results; with --all (or
// --update-md) the scenarios refresh the committed charts and BENCHMARKS.md.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { projectRoot } from "../host/paths.js";
import { measureCapacity, type CapacityReport } from "./capacity/index.js";
import { capacityTable, capacityTitle } from "./capacity/report.js";
import { parse, USAGE, UsageError, type Args } from "./cli.js";
import { admissionTable, onOffRows, onOffTable, showsAdmission, stepWindowsTable, type OnOffRow } from "./report/admission-table.js";
import type { RowsBlock } from "./report/rows-block.js";
import { liveAdmissionBlock, liveAdmissionTable, liveBlock, liveTable, ON_OFF_BLOCK, replaceBlock, scenarioBlock, scenarioKey, withScenarioRows } from "./report/benchmarks-md.js";
import { publishCharts, writeCharts, writeJson } from "./report/outputs.js";
import { hasClasses, resultsTable, sloByClassTable } from "./report/results-table.js";
import { consoleTable, markdownTable, type Table } from "./report/table.js";
import { BENCHMARKS_MD, commandLine, defaultIo, progressReporter, updateBlock, type Io } from "./run-io.js";
import { loadScenario, ScenarioError, type Scenario } from "./scenario.js";
import { summariseSeeds } from "./seeds.js";
import { OURS_LIVE, runLive } from "./live/index.js";
import { envoysRows, envoysTable } from "./live/replicas.js";
import { startSimJobs, type SimJob } from "./sim/pool.js";
import { effectiveScenario } from "./sim/simulator.js";
import type { ScenarioResult } from "./types.js";

/** One mode: whether the arguments ask for it, and how it runs (an exit code, or 0). */
interface BenchMode {
  wanted(args: Args): boolean;
  run(args: Args, argv: string[], io: Io): Promise<number | void>;
}

/**
 * In the order they run. --scale and --soak run alone; --capacity,
 * --replicas and plain scenario runs exclude each other; --overhead and
 * --failover run after any of those (cli.ts enforces the combinations).
 */
const MODES: readonly BenchMode[] = [
  { wanted: (a) => a.scale !== undefined, run: runScale },
  { wanted: (a) => a.soak !== undefined, run: runSoak },
  { wanted: (a) => a.capacity, run: runCapacity },
  { wanted: (a) => !a.capacity && a.replicas !== undefined, run: runReplicas },
  { wanted: (a) => !a.capacity && a.replicas === undefined && a.scenarios.length > 0, run: runScenarios },
  { wanted: (a) => a.overhead, run: runOverheadBench },
  { wanted: (a) => a.failover, run: runFailoverBench },
];

/** Runs the command; returns the exit code. */
export async function runBench(argv: string[], io: Io = defaultIo): Promise<number> {
  try {
    const args = parse(argv);
    if (args === "help") {
      io.out(`${USAGE}\n`);
      return 0;
    }
    for (const mode of MODES.filter((m) => m.wanted(args))) {
      const code = await mode.run(args, argv, io);
      if (code) return code;
    }
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

/** Live results are kept apart from simulated ones: `heterogeneous-live`, `x-live-llamacpp` on real servers. */
function resultName(r: ScenarioResult): string {
  return r.mode === "live" ? `${r.scenario}-live${r.pods ? `-${r.pods}` : ""}` : r.scenario;
}

/**
 * Starts every scenario's runs, one per seed: simulations on the pool, live
 * runs one after another. Returns each scenario's results, in seed order.
 */
function startRuns(scenarios: readonly Scenario[], args: Args, io: Io): Array<Array<Promise<ScenarioResult>>> {
  const seeds = args.seeds ?? [undefined];
  const jobs: SimJob[] = scenarios.flatMap((scenario) => seeds.map((seed) => ({ scenario, opts: { seed, durationS: args.durationS, policies: args.policies, envoys: args.envoys, fleet: args.fleet } })));
  const concurrent = args.mode === "sim" && args.jobs > 1 && jobs.length > 1;
  const reporters = jobs.map((j) => progressReporter(io, seeds.length > 1 ? `${j.scenario.name} seed ${j.opts.seed}` : j.scenario.name, concurrent));
  const onProgress = (i: number, policy: string, fraction: number) => reporters[i](policy, fraction);
  let runs: Array<Promise<ScenarioResult>>;
  if (args.mode === "live") {
    let previous: Promise<unknown> = Promise.resolve();
    runs = jobs.map((j, i) => {
      const run = previous.then(() => runLive(j.scenario, { ...j.opts, onProgress: (policy, f) => onProgress(i, policy, f) }));
      previous = run;
      return run;
    });
  } else {
    runs = startSimJobs(jobs, args.jobs, onProgress);
  }
  return scenarios.map((_, k) => runs.slice(k * seeds.length, (k + 1) * seeds.length));
}

async function runScenarios(args: Args, argv: string[], io: Io): Promise<void> {
  const outputs: unknown[] = [];
  const chartDir = join(projectRoot, "bench", "charts");
  const updateDocs = (args.all || args.updateMd) && !args.smoke;
  let doc = updateDocs ? readFileSync(BENCHMARKS_MD, "utf8") : "";

  const onOff: OnOffRow[] = [];
  const rewritten = new Set<string>();
  const started = startRuns(args.scenarios.map(loadScenario), args, io);
  for (const pending of started) {
    const runs = await Promise.all(pending);
    const first = runs[0];
    const dir = join(args.outDir, resultName(first));
    // Charts show the first seed; with several, each seed's result has its own folder.
    const charts = await writeCharts(first, dir);
    const summary = summariseSeeds(runs);
    const seeds = runs.length > 1 ? `seeds ${summary.seeds.join(", ")}` : `seed ${first.seed}`;
    if (runs.length > 1) {
      for (const r of runs) writeJson(join(dir, `seed-${r.seed}`, "result.json"), r);
      writeJson(join(dir, "seeds.json"), summary);
      outputs.push({ summary, results: runs });
    } else {
      writeJson(join(dir, "result.json"), first);
      outputs.push(first);
    }
    io.out(`\n${first.scenario} (${first.mode}, ${seeds}, ${first.durationS} s, ${summary.requests.join(" / ")} requests)\n${consoleTable(resultsTable(runs))}\n`);
    if (hasClasses(summary)) io.out(`\nSLO goodput by class (share of each class's requests)\n${consoleTable(sloByClassTable(summary))}\n`);
    printAdmission(runs, io);
    if (args.envoys) printEnvoys(runs, args.envoys, io);
    if (first.mode === "sim") onOff.push(...onOffRows(runs));
    io.out(`results: ${relative(process.cwd(), dir) || "."}/\n`);
    if (updateDocs) {
      const rel = publishCharts(resultName(first), charts, chartDir, projectRoot);
      const command = commandLine(argv);
      // With --all a block shared by the scenarios starts anew at its first write.
      const withRows = (block: RowsBlock, table: Table) => {
        doc = withScenarioRows(doc, block, table, command, args.all && !rewritten.has(block.key), [first.scenario]);
        rewritten.add(block.key);
      };
      if (first.mode === "live") {
        withRows(liveBlock(first), liveTable(runs, rel));
        if (showsAdmission(first)) withRows(liveAdmissionBlock(first), liveAdmissionTable(runs));
      } else {
        doc = replaceBlock(doc, scenarioKey(first), scenarioBlock(runs, rel, command), `### ${first.scenario}`);
      }
    }
  }
  if (args.json) writeJson(args.json, outputs.length === 1 ? outputs[0] : { results: outputs });
  if (updateDocs) {
    if (onOff.length > 0) doc = withScenarioRows(doc, ON_OFF_BLOCK, onOffTable(onOff), commandLine(argv), args.all, [...new Set(onOff.map((r) => r.scenario))]);
    writeFileSync(BENCHMARKS_MD, doc);
    io.out(`updated ${relative(process.cwd(), BENCHMARKS_MD)} and ${relative(process.cwd(), chartDir)}/\n`);
  }
}

/** Each count of Envoys against one, per seed. */
function printEnvoys(runs: readonly ScenarioResult[], counts: readonly number[], io: Io): void {
  for (const r of runs) io.out(`\nEnvoys against one (seed ${r.seed})\n${consoleTable(envoysTable(envoysRows(r.policies, OURS_LIVE, counts)))}\n`);
}

/** The admission tables of a run with classes or refusals, and ours with against without admission. */
function printAdmission(runs: readonly ScenarioResult[], io: Io): void {
  const first = runs[0];
  if (showsAdmission(first)) {
    io.out(`\nadmission${runs.length > 1 ? ` (seed ${runs.map((r) => r.seed).join(" / ")})` : ""}\n${consoleTable(admissionTable(runs))}\n`);
    const windows = stepWindowsTable(first);
    if (windows) io.out(`\np95 TTFT from first arrival and 429s per 5-s window (seed ${first.seed})\n${consoleTable(windows)}\n`);
  }
  const rows = onOffRows(runs);
  if (rows.length > 0) io.out(`\nours with admission against without\n${consoleTable(onOffTable(rows))}\n`);
}

async function runCapacity(args: Args, _argv: string[], io: Io): Promise<void> {
  const reports: CapacityReport[] = [];
  for (const name of args.scenarios) {
    const scenario = effectiveScenario(loadScenario(name), { seed: args.seeds?.[0], durationS: args.durationS });
    const report = await measureCapacity(scenario, { multiple: args.multiple, policies: args.policies, onProgress: progressReporter(io, `${scenario.name} capacity`) });
    reports.push(report);
    const dir = join(args.outDir, scenario.name);
    writeJson(join(dir, "capacity.json"), report);
    io.out(`\n${capacityTitle(report)}\n${consoleTable(capacityTable(report))}\nresults: ${relative(process.cwd(), dir) || "."}/capacity.json\n`);
  }
  if (args.json) writeJson(args.json, reports.length === 1 ? reports[0] : { reports });
}

async function runReplicas(args: Args, argv: string[], io: Io): Promise<void> {
  const { runReplicaBench } = await import("./replicas-command.js");
  await runReplicaBench(args, argv, io);
}

async function runOverheadBench(args: Args, argv: string[], io: Io): Promise<void> {
  const { runOverhead } = await import("./overhead/index.js");
  const { overheadMarkdown } = await import("./overhead/report.js");
  const report = await runOverhead({
    onProgress: (line) => io.err(`[overhead] ${line}\n`),
    // A smoke run only proves the pipeline works end to end.
    ...(args.smoke ? { durationS: 1, bodySizes: [4096], endpointCounts: [8] } : {}),
  });
  const markdown = overheadMarkdown(report);
  writeJson(join(args.outDir, "overhead", "overhead.json"), report);
  io.out(`\n${markdown}\n`);
  if (!args.smoke) updateBlock(io, "overhead", markdown, undefined, `overhead section; ${commandLine(argv)}`);
}

async function runFailoverBench(args: Args, argv: string[], io: Io): Promise<void> {
  const { runFailover, failoverMarkdown } = await import("../testing/failover/index.js");
  const dir = join(args.outDir, "failover");
  mkdirSync(dir, { recursive: true });
  const report = await runFailover({
    smoke: args.smoke,
    seed: args.failoverSeed,
    logDir: dir,
    command: commandLine(argv),
    onProgress: (line) => io.err(`[failover] ${line}\n`),
  });
  const markdown = failoverMarkdown(report);
  writeJson(join(dir, "failover.json"), report);
  io.out(`\n${markdown}\nresults: ${relative(process.cwd(), dir) || "."}/\n`);
  if (!args.smoke) updateBlock(io, "failover", markdown, "## Failover", `failover section; ${report.command}`);
}

async function runScale(args: Args, _argv: string[], io: Io): Promise<void> {
  const { runScale } = await import("./scale/index.js");
  const { scaleTable, scaleTitle } = await import("./scale/report.js");
  const report = await runScale({ sizes: args.scale!.sizes, measureS: args.durationS, onProgress: (line) => io.err(`[scale] ${line}\n`) });
  const dir = join(args.outDir, "scale");
  writeJson(join(dir, "scale.json"), report);
  const table = scaleTable(report);
  io.out(`\n${scaleTitle(report)}\n${consoleTable(table)}\n\n${markdownTable(table)}\nresults: ${relative(process.cwd(), dir) || "."}/scale.json\n`);
}

async function runSoak(args: Args, _argv: string[], io: Io): Promise<number> {
  const { runSoakCommand } = await import("../testing/soak/command.js");
  const opts = { ...args.soak!, seed: args.seeds![0], outDir: args.outDir };
  return runSoakCommand(opts, (line) => io.out(`${line}\n`), (line) => io.err(`${line}\n`));
}
