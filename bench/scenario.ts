// Benchmark scenarios: YAML files validated with zod. Every error names the
// file and the field, e.g. `bench/scenarios/x.yaml: arrivals.rate: expected a number > 0`.
import { readdirSync, readFileSync } from "node:fs";
import { basename, extname, join, relative } from "node:path";
import * as z from "zod";
import { msg, validateYaml } from "../host/validation.js";
import { resolveEngineConfig, type EngineConfigInput } from "../testing/engine/index.js";
import { GPU_NAMES, GPUS, SIMULATED_ENGINE } from "./gpus.js";
import { projectRoot } from "../host/paths.js";

export const SCENARIO_DIR = join(projectRoot, "bench", "scenarios");

const positive = (text = "expected a number > 0") => z.number({ error: msg(text) }).positive({ error: text });
const nonNegative = (text = "expected a number >= 0") => z.number({ error: msg(text) }).min(0, { error: text });
const positiveInt = (text = "expected an integer > 0") => z.number({ error: msg(text) }).int({ error: text }).min(1, { error: text });
const nonNegativeInt = (text = "expected an integer >= 0") => z.number({ error: msg(text) }).int({ error: text }).min(0, { error: text });
const fraction = (text = "expected a number between 0 and 1") => z.number({ error: msg(text) }).min(0, { error: text }).max(1, { error: text });
const NAME_TEXT = "expected a name of letters, digits and . _ - (no spaces)";
const name = z.string({ error: msg(NAME_TEXT) }).regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$/, { error: NAME_TEXT });

/** Engine fields a scenario may override (testing/engine/config.ts); the model and speed come from the pod group. */
const engineOverrides = z
  .strictObject({
    stepOverheadMs: positive(),
    decodeMsPerSeq: nonNegative(),
    decodeMsPerKTokens: nonNegative(),
    prefillMsPerToken: nonNegative(),
    prefillMsPerKTokens: nonNegative(),
    maxNumBatchedTokens: positiveInt(),
    maxNumSeqs: positiveInt(),
    blockSize: positiveInt(),
    numGpuBlocks: positiveInt(),
    maxModelLen: positiveInt(),
    maxLoras: nonNegativeInt(),
    loraLoadMs: nonNegative(),
  })
  .partial();

// Token-count distributions. Draws are rounded and clamped to [min, max].
const fixedDist = z.strictObject({ dist: z.literal("fixed"), value: positiveInt() });
const uniformDist = z.strictObject({ dist: z.literal("uniform"), min: positiveInt(), max: positiveInt() });
const lognormalDist = z.strictObject({
  dist: z.literal("lognormal"),
  median: positive(),
  sigma: nonNegative(),
  min: positiveInt(),
  max: positiveInt(),
});
const DIST_TEXT = 'expected dist: "fixed", "uniform", "lognormal" or "mixture"';
const PART_TEXT = 'expected dist: "fixed", "uniform" or "lognormal"';
const weighted = (s: typeof fixedDist | typeof uniformDist | typeof lognormalDist) => s.extend({ weight: positive() });
const mixtureDist = z.strictObject({
  dist: z.literal("mixture"),
  parts: z
    .array(z.discriminatedUnion("dist", [weighted(fixedDist), weighted(uniformDist), weighted(lognormalDist)], { error: PART_TEXT }), {
      error: msg("expected a list of weighted distributions"),
    })
    .min(1, { error: "expected at least one part" }),
});
const lengthDist = z.discriminatedUnion("dist", [fixedDist, uniformDist, lognormalDist, mixtureDist], { error: DIST_TEXT });

const phase = z.strictObject({ durationS: positive(), rate: nonNegative() });
const ARRIVALS_TEXT = 'expected pattern: "poisson", "phases" or "ramp"';
const arrivals = z.discriminatedUnion(
  "pattern",
  [
    /** Constant-rate Poisson arrivals (requests/s). */
    z.strictObject({ pattern: z.literal("poisson"), rate: positive() }),
    /** A cycle of Poisson phases (bursts and lulls), repeated for the whole duration. */
    z.strictObject({
      pattern: z.literal("phases"),
      phases: z.array(phase, { error: msg("expected a list of {durationS, rate}") }).min(1, { error: "expected at least one phase" }),
    }),
    /** Poisson arrivals whose rate moves linearly from `from` to `to` over the duration. */
    z.strictObject({ pattern: z.literal("ramp"), from: nonNegative(), to: nonNegative() }),
  ],
  { error: ARRIVALS_TEXT },
);

const tier = z.strictObject({ count: positiveInt(), share: positive() });
const model = z.strictObject({
  name,
  /** Relative share of all requests. */
  share: positive().default(1),
  adapters: z
    .strictObject({
      /** Fraction of this model's requests that name the base model rather than an adapter. */
      baseShare: fraction().default(0),
      /** Popularity tiers: `count` adapters split the tier's `share` evenly. */
      tiers: z.array(tier, { error: msg("expected a list of {count, share}") }).min(1, { error: "expected at least one tier" }),
    })
    .optional(),
});

const podGroup = z.strictObject({
  /** Pod names are `<name>-<i>`. */
  name,
  model: name,
  count: positiveInt(),
  /** The GPU class (bench/gpus.ts): its scheduler limits and KV capacity. */
  gpu: z.enum(GPU_NAMES, { error: `expected one of ${GPU_NAMES.join(", ")}` }).default("h100"),
  /** Relative GPU speed (1.0 = the engine model's H100-class profile). */
  speed: positive().default(1),
  engine: engineOverrides.default({}),
});

/** How stale the gateway's view is; defaults follow the shipped configs. */
const gatewayModel = z.strictObject({
  /** Aggregator scrape period (config aggregator.scrapeIntervalMs); the reference picker's refresh period too. */
  scrapeIntervalMs: positive().default(50),
  /** From a scrape being sent to its values reaching the scraper. */
  scrapeLatencyMs: nonNegative().default(2),
  /** From a new snapshot in the aggregator to the Envoy link's shared data. */
  pushDelayMs: nonNegative().default(2),
  /** The filter's tick: each worker loads a newer snapshot at most this often. */
  refreshMs: positive().default(20),
  /** Aggregator: an endpoint is not fresh once its last good scrape is older. */
  staleAfterMs: positive().default(1000),
  /** Envoy worker threads; each runs its own filter VM with its own pending-pick counts. */
  workers: positiveInt().default(2),
  /** The reference picker runs out of process (ext_proc): time its decision adds to each request. */
  referenceDecisionMs: nonNegative().default(2),
});

/**
 * Flow-control classes (docs/traffic.md): each request's class is drawn from this mix.
 * Fractions of all requests; a class left out gets none. Without it every
 * request is Standard.
 */
const classMix = z.strictObject({ critical: fraction(), standard: fraction(), sheddable: fraction() }).partial();

/** Upper bound on the chat template and request tag the workload adds around the user text. */
export const TEMPLATE_TOKENS = 64;

const scenarioSchema = z.strictObject({
  name: name.optional(),
  description: z.string({ error: msg("expected text") }).default(""),
  seed: nonNegativeInt().max(0xffffffff, { error: "expected an integer 0..4294967295" }).default(1),
  /** Arrivals happen in [0, durationS); the run goes on until every request has finished. */
  durationS: positive(),
  /** Requests still unfinished this long after the last arrival are counted as errors (timeout). */
  drainLimitS: positive().default(900),
  gateway: gatewayModel.prefault({}),
  /** Engine overrides for every pod; a pod group's own `engine` wins. */
  engine: engineOverrides.default({}),
  models: z.array(model, { error: msg("expected a list of models") }).min(1, { error: "expected at least one model" }),
  fleet: z.array(podGroup, { error: msg("expected a list of pod groups") }).min(1, { error: "expected at least one pod group" }),
  arrivals,
  /** Tokens of the user message (the part unique to each request). */
  prompt: lengthDist,
  /** max_tokens; the engine model always generates exactly this many. */
  output: lengthDist,
  /** Some requests start with one of `groups` shared system prompts of `tokens` tokens. */
  sharedPrefix: z
    .strictObject({
      fraction: fraction(),
      groups: positiveInt(),
      tokens: positiveInt(),
      /**
       * Uneven popularity, as tenants' traffic is: group g (from 0) is drawn
       * with weight 1/(g+1)^zipf. Without it every group is equally likely.
       */
      zipf: nonNegative().optional(),
    })
    .optional(),
  classes: classMix.optional(),
  /**
   * Lengths of one class's requests where they differ from `prompt` and
   * `output` (a batch job sent as Sheddable beside chat, say).
   */
  classLengths: z
    .strictObject(Object.fromEntries(["critical", "standard", "sheddable"].map((c) => [c, z.strictObject({ prompt: lengthDist, output: lengthDist }).partial().optional()])))
    .optional(),
});

export type LengthDist = z.output<typeof lengthDist>;
export type Arrivals = z.output<typeof arrivals>;

/** A pod group's engine settings: what every simulated pod shares, its GPU's profile, then the scenario's and the group's overrides. */
export function podEngineSettings(s: Pick<Scenario, "engine">, g: Scenario["fleet"][number]): Omit<EngineConfigInput, "model"> {
  return { ...SIMULATED_ENGINE, ...GPUS[g.gpu], ...s.engine, ...g.engine, speed: g.speed };
}

/** The same, for its model. */
export function podEngine(s: Pick<Scenario, "engine">, g: Scenario["fleet"][number]): EngineConfigInput {
  return { ...podEngineSettings(s, g), model: g.model };
}
export type GatewayModel = z.output<typeof gatewayModel>;
export type ClassMix = z.output<typeof classMix>;

export type Scenario = Omit<z.output<typeof scenarioSchema>, "name"> & {
  name: string;
  /** The file it was loaded from, or a label. */
  source: string;
};

export class ScenarioError extends Error {
  constructor(
    readonly source: string,
    readonly issues: string[],
  ) {
    super(issues.map((i) => `${source}: ${i}`).join("\n"));
    this.name = "ScenarioError";
  }
}

/** The largest value a distribution can draw. */
export function distMax(d: LengthDist): number {
  switch (d.dist) {
    case "fixed":
      return d.value;
    case "mixture":
      return Math.max(...d.parts.map(distMax));
    default:
      return d.max;
  }
}

function distIssues(d: LengthDist, path: string): string[] {
  const parts = d.dist === "mixture" ? d.parts.map((p, i) => [p, `${path}.parts[${i}]`] as const) : [[d, path] as const];
  return parts.flatMap(([p, at]) => (p.dist !== "fixed" && p.min > p.max ? [`${at}.max: must be >= min (${p.min})`] : []));
}

/** Checks across fields: references, and requests that no pod could ever serve. */
function crossCheck(s: z.output<typeof scenarioSchema>): string[] {
  const issues: string[] = [];
  const models = new Map<string, number>();
  s.models.forEach((m, i) => {
    if (models.has(m.name)) issues.push(`models[${i}].name: duplicate model "${m.name}"`);
    models.set(m.name, i);
  });
  const groups = new Set<string>();
  s.fleet.forEach((g, i) => {
    if (groups.has(g.name)) issues.push(`fleet[${i}].name: duplicate pod group "${g.name}"`);
    groups.add(g.name);
    if (!models.has(g.model)) issues.push(`fleet[${i}].model: unknown model "${g.model}" (models: ${[...models.keys()].join(", ")})`);
  });
  s.models.forEach((m, i) => {
    const pods = s.fleet.filter((g) => g.model === m.name);
    if (pods.length === 0) issues.push(`models[${i}].name: no pod group in fleet serves "${m.name}"`);
    if (m.adapters && pods.some((g) => (g.engine.maxLoras ?? s.engine.maxLoras ?? 1) < 1)) {
      issues.push(`models[${i}].adapters: a pod group serving "${m.name}" has maxLoras 0`);
    }
  });
  issues.push(...distIssues(s.prompt, "prompt"), ...distIssues(s.output, "output"));
  for (const [c, lengths] of Object.entries(s.classLengths ?? {})) {
    if (lengths?.prompt) issues.push(...distIssues(lengths.prompt, `classLengths.${c}.prompt`));
    if (lengths?.output) issues.push(...distIssues(lengths.output, `classLengths.${c}.output`));
  }
  // A request no pod can hold would only measure the 400 path: refuse the file instead.
  const lengths = [{ prompt: s.prompt, output: s.output }, ...Object.values(s.classLengths ?? {})];
  const longest = (s.sharedPrefix?.tokens ?? 0) + TEMPLATE_TOKENS +
    Math.max(...lengths.map((l) => distMax(l?.prompt ?? s.prompt) + distMax(l?.output ?? s.output)));
  s.fleet.forEach((g, i) => {
    const cfg = resolveEngineConfig(podEngine(s, g));
    const limit = Math.min(cfg.maxModelLen, cfg.numGpuBlocks * cfg.blockSize);
    if (longest > limit) {
      issues.push(`fleet[${i}].engine.maxModelLen: the longest request (${longest} tokens incl. prefix, output and chat template) exceeds this group's limit of ${limit}`);
    }
  });
  if (s.classes) {
    const total = (s.classes.critical ?? 0) + (s.classes.standard ?? 0) + (s.classes.sheddable ?? 0);
    if (Math.abs(total - 1) > 1e-6) issues.push(`classes: the fractions must sum to 1 (they sum to ${Number(total.toFixed(6))})`);
  }
  if (s.arrivals.pattern === "phases" && s.arrivals.phases.every((p) => p.rate === 0)) issues.push("arrivals.phases: every phase has rate 0");
  if (s.arrivals.pattern === "ramp" && s.arrivals.from === 0 && s.arrivals.to === 0) issues.push("arrivals: a ramp from 0 to 0 sends nothing");
  return issues;
}

export function parseScenario(text: string, source: string, fallbackName = "scenario"): Scenario {
  const result = validateYaml(scenarioSchema, text, crossCheck);
  if ("issues" in result) throw new ScenarioError(source, result.issues);
  return { ...result.data, name: result.data.name ?? fallbackName, source };
}

/** Names of the shipped scenarios (bench/scenarios/*.yaml), sorted. */
export function listScenarios(): string[] {
  return readdirSync(SCENARIO_DIR)
    .filter((f) => f.endsWith(".yaml"))
    .map((f) => basename(f, ".yaml"))
    .sort();
}

/** A shipped scenario's name, or a path to any scenario file. */
export function resolveScenarioPath(nameOrPath: string): string {
  const isPath = nameOrPath.includes("/") || extname(nameOrPath) === ".yaml" || extname(nameOrPath) === ".yml";
  return isPath ? nameOrPath : join(SCENARIO_DIR, `${nameOrPath}.yaml`);
}

/** Paths under the working directory are shown relative to it, as a user would type them. */
function displayPath(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel && !rel.startsWith("..") ? rel : path;
}

export function loadScenario(nameOrPath: string): Scenario {
  const path = displayPath(resolveScenarioPath(nameOrPath));
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    const known = resolveScenarioPath(nameOrPath) === nameOrPath ? "" : ` (shipped scenarios: ${listScenarios().join(", ")})`;
    throw new ScenarioError(path, [`cannot read file: ${(err as Error).message}${known}`]);
  }
  return parseScenario(text, path, basename(path, extname(path)));
}
