// `npm run bench -- ...`, the one benchmark command: runs scenarios (sim or
// live mode) and the filter overhead, failover, scale and soak benchmarks,
// prints the tables, writes results and charts, and with --all refreshes
// the committed charts and BENCHMARKS.md.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { projectRoot } from "../host/paths.js";
import { DEFAULT_MULTIPLE, measureCapacity, type CapacityReport } from "./capacity/index.js";
import { capacityTable, capacityTitle } from "./capacity/report.js";
import { admissionTable, onOffRows, onOffTable, showsAdmission, stepWindowsTable, type OnOffRow } from "./report/admission-table.js";
import { replaceBlock, scenarioBlock, scenarioKey, seedsBlock, withOnOffRows } from "./report/benchmarks-md.js";
import { publishCharts, writeCharts, writeJson } from "./report/outputs.js";
import { hasClasses, seedsTable, sloByClassTable } from "./report/seeds-table.js";
import { consoleTable, resultsTable } from "./report/table.js";
import { listScenarios, loadScenario, ScenarioError, type Scenario } from "./scenario.js";
import { summariseSeeds } from "./seeds.js";
import { selectPolicies } from "./policies/index.js";
import { OURS_LIVE, runLive } from "./live/index.js";
import { envoysRows, envoysTable } from "./live/replicas.js";
import { DEFAULT_SIZES } from "./scale/index.js";
import { SOAK_DEFAULTS } from "../testing/soak/command.js";
import { startSimJobs, type SimJob } from "./sim/pool.js";
import { effectiveScenario } from "./sim/simulator.js";
import { LIVE_FLEETS, type LiveFleetKind, type Mode, type ScenarioResult } from "./types.js";

/** Targets are judged on these seeds: `--all` in sim mode runs each. */
export const ALL_SEEDS = [1, 2, 3];

const USAGE = `usage: npm run bench -- [options]
  --scenario NAME|PATH  run one scenario (a name from bench/scenarios/, or a file); repeatable
  --all                 run every scenario in bench/scenarios/; refreshes bench/charts/ and BENCHMARKS.md
  --update-md           with --scenario in sim mode: refresh those scenarios' sections of BENCHMARKS.md and their
                        charts, as --all does for every one (seeds default to ${ALL_SEEDS.join(",")})
  --mode sim|live       sim: discrete-event simulation in virtual time (default); live: real Envoy and fake fleet
  --seed N              override the scenario's seed (or the failover bench's arrivals)
  --seeds A,B,...       run each scenario once per seed and report the mean, the spread and each seed's p95
                        (--all in sim mode defaults to seeds ${ALL_SEEDS.join(",")})
  --duration S          override the scenario's duration (seconds of arrivals)
  --policies A,B        run only these policies
  --jobs N              simulations to run at once, each seed of each scenario being one (default: the machine's
                        cores, ${availableParallelism()} here)
  --json FILE           also write the result(s) to FILE
  --out DIR             results folder (default bench/results); each scenario writes DIR/<scenario>/
  --overhead            run the filter-overhead benchmark too (alone if no scenario is given)
  --failover            run the failover benchmark too (alone if no scenario is given): client errors when a pod
                        dies, answers 500, or dies after the aggregator; writes DIR/failover/ and BENCHMARKS.md
  --replicas A,B,...    instead, each scenario with A, B, ... gateway replicas behind a round-robin front, sharing
                        nothing but the snapshot (sim mode); the tables per replica count and the loss against one;
                        writes DIR/replicas/ (with --all, BENCHMARKS.md's replicas section too)
  --share-interval MS   with --replicas: the replicas share in-flight counts, prefix placements and queue boards
                        through the aggregator every MS ms (as built: the link's reports, the aggregator's merges)
  --fleet fake|llamacpp live mode: the pods are fake servers (default) or real llama.cpp servers (llama-server
                        from scripts/llamacpp/build-llama-server.sh); bench/scenarios/real-engine/ is sized for them
  --envoys A,B,...      live mode: run ours once per count of Envoys, each behind a round-robin front Envoy
                        (one aggregator), e.g. 1,3; prints each count's p95 and goodput against one Envoy's
  --capacity            instead of comparing policies, measure each scenario's capacity on its own mix: its trace
                        replayed --multiple times faster (default ${DEFAULT_MULTIPLE}) through round-robin and the oracle
                        (or --policies); writes DIR/<scenario>/capacity.json
  --smoke               a short run for CI: every scenario (or the given ones) for a few seconds, or a shortened
                        overhead or failover bench; no BENCHMARKS.md update
  --scale               instead, the aggregator against N fake vLLM pods: --sizes A,B,... (default
                        ${DEFAULT_SIZES.join(",")}), --duration S measured per size (default 10, after a 4 s warm-up);
                        writes DIR/scale/scale.json
  --soak                instead, the real stack for --minutes N (default ${SOAK_DEFAULTS.minutes}) at --rate R req/s (default
                        ${SOAK_DEFAULTS.ratePerS}) with a cycle of faults a minute (--seed for the traffic); exits 1 when it fails;
                        writes --out DIR (default bench/results/soak-<UTC time>/); \`npm run soak\` is the same
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

export interface Args {
  scenarios: string[];
  mode: Mode;
  /** Seeds to run each scenario with; undefined runs the scenario's own. */
  seeds?: number[];
  /** --seed, for the failover bench's arrivals. */
  failoverSeed?: number;
  durationS?: number;
  policies?: string[];
  /** Simulations at once. */
  jobs: number;
  json?: string;
  outDir: string;
  overhead: boolean;
  failover: boolean;
  capacity: boolean;
  multiple?: number;
  smoke: boolean;
  all: boolean;
  /** --update-md: the given scenarios' sections of BENCHMARKS.md are refreshed. */
  updateMd: boolean;
  /** Set for --scale: the fleet sizes (default the bench's). */
  scale?: { sizes?: number[] };
  /** Set for --soak. */
  soak?: { minutes: number; ratePerS: number };
  /** Set for --replicas: the gateway replica counts to run each scenario with. */
  replicas?: number[];
  /** --envoys: live runs of ours with these counts of Envoys. */
  envoys?: number[];
  /** --fleet: what the live pods are. */
  fleet?: LiveFleetKind;
  /** --share-interval: the replicas share state through the control plane (docs/replicas.md). */
  shareIntervalMs?: number;
}

function parseSeed(text: string, option: string): number {
  const seed = Number(text);
  if (text.trim() === "" || !Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
    throw new UsageError(`${option}: expected an integer 0..4294967295, got ${JSON.stringify(text)}`);
  }
  return seed;
}

export function parse(argv: string[]): Args | "help" {
  const { values } = parseArgs({
    args: argv,
    options: {
      scenario: { type: "string", multiple: true },
      all: { type: "boolean" },
      "update-md": { type: "boolean" },
      mode: { type: "string" },
      seed: { type: "string" },
      seeds: { type: "string" },
      duration: { type: "string" },
      policies: { type: "string" },
      jobs: { type: "string" },
      json: { type: "string" },
      out: { type: "string" },
      overhead: { type: "boolean" },
      failover: { type: "boolean" },
      capacity: { type: "boolean" },
      replicas: { type: "string" },
      "share-interval": { type: "string" },
      envoys: { type: "string" },
      fleet: { type: "string" },
      multiple: { type: "string" },
      smoke: { type: "boolean" },
      scale: { type: "boolean" },
      sizes: { type: "string" },
      soak: { type: "boolean" },
      minutes: { type: "string" },
      rate: { type: "string" },
      help: { type: "boolean" },
    },
    strict: true,
  });
  if (values.help) return "help";
  const standalone = (values.scale ? 1 : 0) + (values.soak ? 1 : 0);
  if (standalone > 1) throw new UsageError("--scale and --soak exclude each other");
  if (standalone === 1) {
    const others = ["scenario", "all", "update-md", "mode", "seeds", "policies", "jobs", "json", "overhead", "failover", "capacity", "replicas", "multiple", "smoke"] as const;
    const given = others.filter((k) => values[k] !== undefined);
    if (given.length > 0) throw new UsageError(`--${values.scale ? "scale" : "soak"} runs alone: drop --${given.join(", --")}`);
  }
  if (values.sizes !== undefined && !values.scale) throw new UsageError("--sizes: only with --scale");
  if ((values.minutes !== undefined || values.rate !== undefined) && !values.soak) throw new UsageError("--minutes and --rate: only with --soak");
  const mode = values.mode ?? "sim";
  if (mode !== "sim" && mode !== "live") throw new UsageError(`--mode: expected sim or live, got ${JSON.stringify(mode)}`);
  if (values.seed !== undefined && values.seeds !== undefined) throw new UsageError("--seed and --seeds exclude each other");
  let seeds = values.seed !== undefined ? [parseSeed(values.seed, "--seed")] : values.seeds?.split(",").map((t) => parseSeed(t, "--seeds"));
  if (seeds && new Set(seeds).size !== seeds.length) throw new UsageError(`--seeds: a seed is repeated in ${JSON.stringify(values.seeds)}`);
  if (values.scale) {
    if (values.seed !== undefined) throw new UsageError("--scale takes no --seed");
    const sizes = values.sizes?.split(",").map((t) => Number(t));
    if (sizes?.some((n) => !Number.isInteger(n) || n < 1)) throw new UsageError(`--sizes: expected integers >= 1, got ${JSON.stringify(values.sizes)}`);
    return { ...standaloneArgs(values.out, positive(values.duration, "--duration")), scale: { sizes } };
  }
  if (values.soak) {
    const minutes = positive(values.minutes, "--minutes") ?? SOAK_DEFAULTS.minutes;
    // The schedule runs whole one-minute cycles.
    if (!Number.isInteger(minutes)) throw new UsageError(`--minutes: expected a whole number of minutes, got ${values.minutes}`);
    if (values.duration !== undefined) throw new UsageError("--soak: give --minutes, not --duration");
    const seed = values.seed === undefined ? SOAK_DEFAULTS.seed : parseSeed(values.seed, "--seed");
    const stamp = new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z");
    return {
      ...standaloneArgs(values.out ?? join(projectRoot, "bench", "results", `soak-${stamp}`), undefined),
      seeds: [seed],
      soak: { minutes, ratePerS: positive(values.rate, "--rate") ?? SOAK_DEFAULTS.ratePerS },
    };
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
  const capacity = values.capacity ?? false;
  let scenarios = values.scenario ?? [];
  if (all && scenarios.length > 0) throw new UsageError("--all and --scenario exclude each other");
  if (all || (smoke && scenarios.length === 0 && !overhead && !failover)) scenarios = listScenarios();
  if (scenarios.length === 0 && !overhead && !failover) {
    throw new UsageError("nothing to run: give --scenario NAME, --all, --smoke, --overhead or --failover");
  }
  if (capacity && (mode !== "sim" || scenarios.length === 0)) throw new UsageError("--capacity: needs --scenario NAME or --all, in sim mode");
  if (capacity && seeds && seeds.length > 1) throw new UsageError("--capacity: give one --seed");
  let multiple: number | undefined;
  if (values.multiple !== undefined) {
    multiple = Number(values.multiple);
    if (!capacity) throw new UsageError("--multiple: only with --capacity");
    if (!(multiple > 1)) throw new UsageError(`--multiple: expected a number > 1, got ${JSON.stringify(values.multiple)}`);
  }
  const replicas = parseReplicas(values.replicas);
  const shareIntervalMs = positive(values["share-interval"], "--share-interval");
  if (shareIntervalMs !== undefined && !replicas) throw new UsageError("--share-interval: only with --replicas");
  if (replicas && (mode !== "sim" || capacity || scenarios.length === 0)) throw new UsageError("--replicas: needs --scenario NAME or --all, in sim mode, without --capacity");
  const envoys = parseEnvoys(values.envoys);
  if (envoys && (mode !== "live" || scenarios.length === 0)) throw new UsageError("--envoys: needs --mode live and --scenario NAME or --all");
  const fleet = values.fleet as LiveFleetKind | undefined;
  if (fleet !== undefined && !LIVE_FLEETS.includes(fleet)) throw new UsageError(`--fleet: expected ${LIVE_FLEETS.join(" or ")}, got ${JSON.stringify(values.fleet)}`);
  if (fleet !== undefined && (mode !== "live" || scenarios.length === 0)) throw new UsageError("--fleet: needs --mode live and --scenario NAME or --all");
  const updateMd = values["update-md"] ?? false;
  if (updateMd && (all || smoke || capacity || replicas || mode !== "sim" || scenarios.length === 0)) {
    throw new UsageError("--update-md: needs --scenario NAME in sim mode, without --smoke, --capacity or --replicas (--all refreshes every section)");
  }
  if ((all || updateMd) && !smoke && !capacity && mode === "sim") seeds ??= ALL_SEEDS;
  const jobs = values.jobs === undefined ? availableParallelism() : Number(values.jobs);
  if (!Number.isInteger(jobs) || jobs < 1) throw new UsageError(`--jobs: expected an integer >= 1, got ${JSON.stringify(values.jobs)}`);
  const policies = values.policies?.split(",").map((p) => p.trim()).filter((p) => p !== "");
  try {
    selectPolicies(policies);
  } catch (err) {
    throw new UsageError(`--policies: ${(err as Error).message}`);
  }
  return {
    scenarios,
    mode,
    seeds,
    failoverSeed: values.seed === undefined ? undefined : seeds![0],
    durationS: durationS ?? (smoke ? SMOKE_DURATION_S : undefined),
    policies,
    jobs,
    json: values.json,
    outDir: values.out ?? join(projectRoot, "bench", "results"),
    overhead,
    failover,
    capacity,
    multiple,
    smoke,
    all,
    updateMd,
    replicas,
    shareIntervalMs,
    envoys,
    fleet,
  };
}

function parseEnvoys(text: string | undefined): number[] | undefined {
  if (text === undefined) return undefined;
  const counts = text.split(",").map((t) => Number(t));
  if (counts.some((n) => !Number.isInteger(n) || n < 1 || n > 8)) throw new UsageError(`--envoys: expected integers 1..8, got ${JSON.stringify(text)}`);
  if (new Set(counts).size !== counts.length) throw new UsageError(`--envoys: a count is repeated in ${JSON.stringify(text)}`);
  return counts;
}

function parseReplicas(text: string | undefined): number[] | undefined {
  if (text === undefined) return undefined;
  const counts = text.split(",").map((t) => Number(t));
  if (counts.some((n) => !Number.isInteger(n) || n < 1 || n > 64)) throw new UsageError(`--replicas: expected integers 1..64, got ${JSON.stringify(text)}`);
  if (new Set(counts).size !== counts.length) throw new UsageError(`--replicas: a count is repeated in ${JSON.stringify(text)}`);
  return counts;
}

function positive(text: string | undefined, option: string): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!(Number.isFinite(n) && n > 0)) throw new UsageError(`${option}: expected a number > 0, got ${JSON.stringify(text)}`);
  return n;
}

/** The arguments of a run that is only --scale or --soak. */
function standaloneArgs(out: string | undefined, durationS: number | undefined): Args {
  return {
    scenarios: [], mode: "sim", durationS, jobs: 1, outDir: out ?? join(projectRoot, "bench", "results"),
    overhead: false, failover: false, capacity: false, smoke: false, all: false, updateMd: false,
  };
}

/** Percent of virtual time per policy: redrawn in place on a terminal, every 25% otherwise. */
function progressReporter(io: Io, scenario: string): (policy: string, fraction: number) => void {
  let lastQuarter = -1;
  // From a policy's first report: a queued run has not started.
  let started: number | undefined;
  return (policy, fraction) => {
    started ??= Date.now();
    const pct = Math.floor(fraction * 100);
    const label = `[${scenario}] ${policy.padEnd(14)} ${String(pct).padStart(3)}%`;
    if (fraction >= 1) {
      io.err(`${io.errIsTty ? "\r\x1b[K" : ""}${label} in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
      started = undefined;
      lastQuarter = -1;
    } else if (io.errIsTty) {
      io.err(`\r\x1b[K${label}`);
    } else if (Math.floor(pct / 25) > lastQuarter) {
      lastQuarter = Math.floor(pct / 25);
      io.err(`${label}\n`);
    }
  };
}

/** Live results are kept apart from simulated ones: `heterogeneous-live`, `x-live-llamacpp` on real servers. */
function resultName(r: ScenarioResult): string {
  return r.mode === "live" ? `${r.scenario}-live${r.pods ? `-${r.pods}` : ""}` : r.scenario;
}

/** The command line as a user would type it, for the record in BENCHMARKS.md. */
function commandLine(argv: string[]): string {
  return ["npm run bench --", ...argv.map((a) => (/^[\w./:=,-]+$/.test(a) ? a : JSON.stringify(a)))].join(" ");
}

/**
 * Starts every scenario's runs, one per seed: simulations on the pool, live
 * runs one after another. Returns each scenario's results, in seed order.
 */
function startRuns(scenarios: readonly Scenario[], args: Args, io: Io): Array<Array<Promise<ScenarioResult>>> {
  const seeds = args.seeds ?? [undefined];
  const jobs: SimJob[] = scenarios.flatMap((scenario) => seeds.map((seed) => ({ scenario, opts: { seed, durationS: args.durationS, policies: args.policies, envoys: args.envoys, fleet: args.fleet } })));
  // Concurrent runs interleave their progress: whole lines then, never one redrawn in place.
  const concurrent = args.mode === "sim" && args.jobs > 1 && jobs.length > 1;
  const reporters = jobs.map((j) => progressReporter(concurrent ? { ...io, errIsTty: false } : io, seeds.length > 1 ? `${j.scenario.name} seed ${j.opts.seed}` : j.scenario.name));
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
  const benchmarksPath = join(projectRoot, "BENCHMARKS.md");
  const chartDir = join(projectRoot, "bench", "charts");
  const updateDocs = (args.all || args.updateMd) && !args.smoke;
  let doc = updateDocs ? readFileSync(benchmarksPath, "utf8") : "";

  const onOff: OnOffRow[] = [];
  const started = startRuns(args.scenarios.map(loadScenario), args, io);
  for (const pending of started) {
    const runs = await Promise.all(pending);
    const first = runs[0];
    const dir = join(args.outDir, resultName(first));
    // Charts show the first seed; with several, each seed's result has its own folder.
    const charts = await writeCharts(first, dir);
    const summary = runs.length > 1 ? summariseSeeds(runs) : undefined;
    if (summary) {
      for (const r of runs) writeJson(join(dir, `seed-${r.seed}`, "result.json"), r);
      writeJson(join(dir, "seeds.json"), summary);
      outputs.push({ summary, results: runs });
      io.out(`\n${first.scenario} (${first.mode}, seeds ${summary.seeds.join(", ")}, ${first.durationS} s, ${summary.requests.join(" / ")} requests)\n`);
      io.out(`${consoleTable(seedsTable(summary))}\n`);
      if (hasClasses(summary)) io.out(`\nSLO goodput by class (share of each class's requests)\n${consoleTable(sloByClassTable(summary))}\n`);
    } else {
      writeJson(join(dir, "result.json"), first);
      outputs.push(first);
      io.out(`\n${first.scenario} (${first.mode}, seed ${first.seed}, ${first.durationS} s, ${first.offered.requests} requests)\n`);
      io.out(`${consoleTable(resultsTable(first))}\n`);
    }
    printAdmission(runs, io);
    if (args.envoys) printEnvoys(runs, args.envoys, io);
    if (first.mode === "sim") onOff.push(...onOffRows(runs));
    io.out(`results: ${relative(process.cwd(), dir) || "."}/\n`);
    if (updateDocs) {
      const names = publishCharts(resultName(first), charts, chartDir);
      const rel = {
        cdf: relative(projectRoot, join(chartDir, names.cdf)),
        timeline: relative(projectRoot, join(chartDir, names.timeline)),
        admission: names.admission && relative(projectRoot, join(chartDir, names.admission)),
      };
      const heading = `### ${first.scenario}${first.mode === "live" ? (first.pods ? ` (live, real ${first.pods} pods)` : " (live)") : ""}`;
      const block = summary ? seedsBlock(summary, runs, rel, commandLine(argv)) : scenarioBlock(first, rel, commandLine(argv));
      doc = replaceBlock(doc, scenarioKey(first), block, heading);
    }
  }
  if (args.json) writeJson(args.json, outputs.length === 1 ? outputs[0] : { results: outputs });
  if (updateDocs) {
    if (onOff.length > 0) doc = withOnOffRows(doc, onOff, commandLine(argv), args.all);
    writeFileSync(benchmarksPath, doc);
    io.out(`updated ${relative(process.cwd(), benchmarksPath)} and ${relative(process.cwd(), chartDir)}/\n`);
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

async function runCapacity(args: Args, io: Io): Promise<void> {
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
  const concurrent = args.jobs > 1;
  await runReplicaBench(
    { ...args, scenarios: args.scenarios, replicas: args.replicas!, updateDocs: args.all && !args.smoke },
    { out: io.out, progress: (label) => progressReporter(concurrent ? { ...io, errIsTty: false } : io, label), command: commandLine(argv) },
  );
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
    if (args.scale) {
      const { runScaleCommand } = await import("./scale/command.js");
      await runScaleCommand({ sizes: args.scale.sizes, measureS: args.durationS, outDir: args.outDir }, io.out, io.err);
      return 0;
    }
    if (args.soak) {
      const { runSoakCommand } = await import("../testing/soak/command.js");
      const opts = { ...args.soak, seed: args.seeds![0], outDir: args.outDir };
      return await runSoakCommand(opts, (line) => io.out(`${line}\n`), (line) => io.err(`${line}\n`));
    }
    if (args.capacity) await runCapacity(args, io);
    else if (args.replicas) await runReplicas(args, argv, io);
    else if (args.scenarios.length > 0) await runScenarios(args, argv, io);
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
