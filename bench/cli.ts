// The benchmark command line: its usage text and the parser that turns
// `npm run bench -- ...` into the one Args every mode reads (command.ts runs them).
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { projectRoot } from "../host/paths.js";
import { SOAK_DEFAULTS } from "../testing/soak/command.js";
import { DEFAULT_MULTIPLE } from "./capacity/index.js";
import { selectPolicies } from "./policies/index.js";
import { DEFAULT_SIZES } from "./scale/index.js";
import { listScenarios } from "./scenario.js";
import { LIVE_FLEETS, type LiveFleetKind, type Mode } from "./types.js";

/** Targets are judged on these seeds: `--all` in sim mode runs each. */
export const ALL_SEEDS = [1, 2, 3];

export const USAGE = `usage: npm run bench -- [options]
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

/** A command line the parser refuses: the message says why (exit code 2). */
export class UsageError extends Error {}

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

const MAX_SEED = 0xffffffff;

/** A comma-separated list of distinct integers min..max; with `list` false, one integer. */
function integers(text: string, option: string, min: number, max = Infinity, list = true): number[] {
  const values = (list ? text.split(",") : [text]).map((t) => (t.trim() === "" ? NaN : Number(t)));
  if (values.some((n) => !Number.isInteger(n) || n < min || n > max)) {
    throw new UsageError(`${option}: expected ${list ? "integers" : "an integer"} ${max === Infinity ? `>= ${min}` : `${min}..${max}`}, got ${JSON.stringify(text)}`);
  }
  if (new Set(values).size !== values.length) throw new UsageError(`${option}: a value is repeated in ${JSON.stringify(text)}`);
  return values;
}

const integer = (text: string, option: string, min: number, max?: number) => integers(text, option, min, max, false)[0];

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
  let seeds = values.seed !== undefined ? [integer(values.seed, "--seed", 0, MAX_SEED)] : values.seeds === undefined ? undefined : integers(values.seeds, "--seeds", 0, MAX_SEED);
  if (values.scale) {
    if (values.seed !== undefined) throw new UsageError("--scale takes no --seed");
    const sizes = values.sizes === undefined ? undefined : integers(values.sizes, "--sizes", 1);
    return { ...standaloneArgs(values.out, positive(values.duration, "--duration")), scale: { sizes } };
  }
  if (values.soak) {
    const minutes = positive(values.minutes, "--minutes") ?? SOAK_DEFAULTS.minutes;
    // The schedule runs whole one-minute cycles.
    if (!Number.isInteger(minutes)) throw new UsageError(`--minutes: expected a whole number of minutes, got ${values.minutes}`);
    if (values.duration !== undefined) throw new UsageError("--soak: give --minutes, not --duration");
    const seed = values.seed === undefined ? SOAK_DEFAULTS.seed : seeds![0];
    const stamp = new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z");
    return {
      ...standaloneArgs(values.out ?? join(projectRoot, "bench", "results", `soak-${stamp}`), undefined),
      seeds: [seed],
      soak: { minutes, ratePerS: positive(values.rate, "--rate") ?? SOAK_DEFAULTS.ratePerS },
    };
  }
  const durationS = positive(values.duration, "--duration");
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
  const replicas = values.replicas === undefined ? undefined : integers(values.replicas, "--replicas", 1, 64);
  const shareIntervalMs = positive(values["share-interval"], "--share-interval");
  if (shareIntervalMs !== undefined && !replicas) throw new UsageError("--share-interval: only with --replicas");
  if (replicas && (mode !== "sim" || capacity || scenarios.length === 0)) throw new UsageError("--replicas: needs --scenario NAME or --all, in sim mode, without --capacity");
  const envoys = values.envoys === undefined ? undefined : integers(values.envoys, "--envoys", 1, 8);
  if (envoys && (mode !== "live" || scenarios.length === 0)) throw new UsageError("--envoys: needs --mode live and --scenario NAME or --all");
  const fleet = values.fleet as LiveFleetKind | undefined;
  if (fleet !== undefined && !LIVE_FLEETS.includes(fleet)) throw new UsageError(`--fleet: expected ${LIVE_FLEETS.join(" or ")}, got ${JSON.stringify(values.fleet)}`);
  if (fleet !== undefined && (mode !== "live" || scenarios.length === 0)) throw new UsageError("--fleet: needs --mode live and --scenario NAME or --all");
  const updateMd = values["update-md"] ?? false;
  if (updateMd && (all || smoke || capacity || replicas || mode !== "sim" || scenarios.length === 0)) {
    throw new UsageError("--update-md: needs --scenario NAME in sim mode, without --smoke, --capacity or --replicas (--all refreshes every section)");
  }
  if ((all || updateMd) && !smoke && !capacity && mode === "sim") seeds ??= ALL_SEEDS;
  const jobs = values.jobs === undefined ? availableParallelism() : integer(values.jobs, "--jobs", 1);
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
