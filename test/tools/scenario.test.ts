// Benchmark scenario files: every shipped one validates, and a bad one is
// refused with the file and the field named.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadStep } from "../../bench/admission.js";
import { listScenarios, loadScenario, parseScenario, podEngine, ScenarioError } from "../../bench/scenario.js";
import { resolveEngineConfig } from "../../testing/engine/index.js";
import { generateTrace } from "../../bench/sim/workload.js";

const VALID = `
durationS: 30
models: [{ name: m }]
fleet: [{ name: gpu, model: m, count: 2 }]
arrivals: { pattern: poisson, rate: 4 }
prompt: { dist: lognormal, median: 300, sigma: 0.5, min: 16, max: 1000 }
output: { dist: fixed, value: 20 }
`;

function issues(text: string, source = "bench/scenarios/x.yaml"): string[] {
  try {
    parseScenario(text, source);
  } catch (err) {
    expect(err).toBeInstanceOf(ScenarioError);
    return (err as Error).message.split("\n");
  }
  throw new Error("the scenario was accepted");
}

describe("scenario files", () => {
  it("ships the required scenarios, and every file validates", () => {
    const names = listScenarios();
    expect(names).toEqual(expect.arrayContaining(["heterogeneous", "bursty", "shared-prefix", "multi-lora", "uniform-steady", "long-context"]));
    for (const name of names) {
      const s = loadScenario(name);
      expect(s.name).toBe(name);
      expect(s.description).not.toBe("");
    }
  });

  it("gives each pod its GPU's scheduler limits and KV, word-piece tokens and attention in prefill; its own engine fields win", () => {
    const s = loadScenario("heterogeneous");
    const [h100, a10g] = s.fleet.map((g) => resolveEngineConfig(podEngine(s, g)));
    expect(h100).toMatchObject({ maxNumBatchedTokens: 8192, maxNumSeqs: 1024, numGpuBlocks: 28_000, tokenizer: "words", prefillMsPerKTokens: 0.008, speed: 1 });
    expect(a10g).toMatchObject({ maxNumBatchedTokens: 2048, maxNumSeqs: 256, numGpuBlocks: 2_800, speed: 0.35 });
    const own = parseScenario(VALID.replace("count: 2 }", "count: 2, gpu: l4, engine: { numGpuBlocks: 100 } }"), "own", "own");
    expect(resolveEngineConfig(podEngine(own, own.fleet[0]))).toMatchObject({ numGpuBlocks: 100, maxNumSeqs: 256 });
    expect(issues(VALID.replace("count: 2 }", "count: 2, gpu: tpu }"))[0]).toBe("bench/scenarios/x.yaml: fleet[0].gpu: expected one of h100, a100, l4, a10g");
  });

  it("loads any file by path, named after the file", () => {
    const dir = mkdtempSync(join(tmpdir(), "scenario-"));
    const path = join(dir, "mine.yaml");
    writeFileSync(path, VALID);
    const s = loadScenario(path);
    expect(s.name).toBe("mine");
    expect(s.gateway).toMatchObject({ scrapeIntervalMs: 50, refreshMs: 20, workers: 2 });
    expect(loadScenario("bench/scenarios/bursty.yaml").arrivals.pattern).toBe("phases");
  });

  it("names the file and the bad field", () => {
    expect(issues(VALID.replace("rate: 4", "rate: -1"))).toEqual(["bench/scenarios/x.yaml: arrivals.rate: expected a number > 0"]);
    expect(issues(VALID.replace("count: 2", "count: 1.5"))).toEqual(["bench/scenarios/x.yaml: fleet[0].count: expected an integer > 0"]);
    expect(issues(VALID.replace("durationS: 30", ""))).toEqual(["bench/scenarios/x.yaml: durationS: is required"]);
    expect(issues(`${VALID}colour: blue\n`)).toEqual(['bench/scenarios/x.yaml: <root>: unknown field "colour"']);
    expect(issues(VALID.replace("pattern: poisson", "pattern: sometimes"))).toEqual([
      'bench/scenarios/x.yaml: arrivals.pattern: expected pattern: "poisson", "phases" or "ramp"',
    ]);
    expect(issues(VALID.replace("dist: fixed, value: 20", "dist: gaussian, value: 20"))).toEqual([
      'bench/scenarios/x.yaml: output.dist: expected dist: "fixed", "uniform", "lognormal" or "mixture"',
    ]);
    expect(issues(VALID.replace("dist: fixed, value: 20", "dist: mixture, parts: [{ dist: fixed, value: 3 }]"))).toEqual([
      "bench/scenarios/x.yaml: output.parts[0].weight: is required",
    ]);
    expect(issues(VALID.replace("min: 16, max: 1000", "min: 500, max: 100"))).toEqual(["bench/scenarios/x.yaml: prompt.max: must be >= min (500)"]);
  });

  it("checks references and limits across fields", () => {
    expect(issues(VALID.replace("model: m,", "model: other,"))).toContain('bench/scenarios/x.yaml: fleet[0].model: unknown model "other" (models: m)');
    const tooLong = issues(VALID.replace("max: 1000", "max: 9000"));
    expect(tooLong[0]).toMatch(/^bench\/scenarios\/x\.yaml: fleet\[0\]\.engine\.maxModelLen: the longest request/);
    const lora = VALID.replace("[{ name: m }]", "[{ name: m, adapters: { tiers: [{ count: 2, share: 1 }] } }]") + "engine: { maxLoras: 0 }\n";
    expect(issues(lora)).toContain("bench/scenarios/x.yaml: models[0].adapters: a pod group serving \"m\" has maxLoras 0");
  });

  it("reports an unreadable file and a YAML syntax error", () => {
    expect(() => loadScenario("no-such-scenario")).toThrow(/no-such-scenario\.yaml: cannot read file: .*shipped scenarios: .*heterogeneous/);
    expect(issues("durationS: [1,")[0]).toMatch(/^bench\/scenarios\/x\.yaml: YAML syntax error/);
  });

  it("draws each request's class from the mix, on a stream of its own", () => {
    const plain = parseScenario(VALID.replace("rate: 4", "rate: 40"), "x");
    expect(plain.classes).toBeUndefined();
    const mixed = parseScenario(`${VALID.replace("rate: 4", "rate: 40")}classes: { critical: 0.2, standard: 0.5, sheddable: 0.3 }\n`, "x");
    expect(mixed.classes).toEqual({ critical: 0.2, standard: 0.5, sheddable: 0.3 });

    const before = generateTrace(plain, 3).requests;
    const after = generateTrace(mixed, 3).requests;
    expect(before.every((r) => r.priority === "standard")).toBe(true);
    // Adding a mix changes nothing else in the trace.
    expect(after.map(({ priority: _, ...rest }) => rest)).toEqual(before.map(({ priority: _, ...rest }) => rest));
    const share = (c: string) => after.filter((r) => r.priority === c).length / after.length;
    expect(after.length).toBeGreaterThan(1000);
    expect(share("critical")).toBeCloseTo(0.2, 1);
    expect(share("standard")).toBeCloseTo(0.5, 1);
    expect(share("sheddable")).toBeCloseTo(0.3, 1);
    // A class left out gets nothing; the draws are the seed's.
    const noShed = parseScenario(`${VALID}classes: { critical: 0.5, standard: 0.5 }\n`, "x");
    expect(generateTrace(noShed, 3).requests.some((r) => r.priority === "sheddable")).toBe(false);
    expect(generateTrace(mixed, 3).requests.map((r) => r.priority)).toEqual(after.map((r) => r.priority));
  });

  it("refuses a class mix that does not sum to 1 or names an unknown class", () => {
    expect(issues(`${VALID}classes: { critical: 0.5, standard: 0.6 }\n`)).toEqual(["bench/scenarios/x.yaml: classes: the fractions must sum to 1 (they sum to 1.1)"]);
    expect(issues(`${VALID}classes: { urgent: 1 }\n`)).toEqual(['bench/scenarios/x.yaml: classes: unknown field "urgent"']);
    expect(issues(`${VALID}classes: { critical: 1.5, sheddable: -0.5 }\n`)).toEqual([
      "bench/scenarios/x.yaml: classes.critical: expected a number between 0 and 1",
      "bench/scenarios/x.yaml: classes.sheddable: expected a number between 0 and 1",
    ]);
  });

  it("skews the shared prefixes' popularity with zipf, moving no other draw", () => {
    const prefix = "sharedPrefix: { fraction: 0.9, groups: 8, tokens: 100 }\n";
    const even = parseScenario(`${VALID.replace("rate: 4", "rate: 40")}${prefix}`, "x");
    const skewed = parseScenario(`${VALID.replace("rate: 4", "rate: 40")}${prefix.replace(" }", ", zipf: 1 }")}`, "x");
    expect(even.sharedPrefix?.zipf).toBeUndefined();
    const before = generateTrace(even, 3).requests;
    const after = generateTrace(skewed, 3).requests;
    expect(after.map(({ prefixGroup: _, ...rest }) => rest)).toEqual(before.map(({ prefixGroup: _, ...rest }) => rest));
    // The same requests carry a prefix; group 0 takes 1/H(8) = 37% of them, group 7 1/8 of that.
    expect(after.map((r) => r.prefixGroup >= 0)).toEqual(before.map((r) => r.prefixGroup >= 0));
    const prefixed = after.filter((r) => r.prefixGroup >= 0);
    const share = (g: number) => prefixed.filter((r) => r.prefixGroup === g).length / prefixed.length;
    expect(share(0)).toBeCloseTo(0.368, 1);
    expect(share(7)).toBeGreaterThan(0.03);
    expect(share(7)).toBeLessThan(0.065);
    expect(issues(`${VALID}${prefix.replace(" }", ", zipf: -1 }")}`)).toEqual(["bench/scenarios/x.yaml: sharedPrefix.zipf: expected a number >= 0"]);
  });

  it("finds the overload scenario's step: base load, 200% for 60 s, back", () => {
    const s = loadScenario("overload");
    expect(s.classes).toEqual({ critical: 0.2, standard: 0.5, sheddable: 0.3 });
    expect(loadStep(s)).toEqual({ baseEndS: 60, stepStartS: 60, stepEndS: 120 });
    // Repeating phases (bursts) and steady arrivals have no single step.
    expect(loadStep(loadScenario("bursty"))).toBeUndefined();
    expect(loadStep(loadScenario("uniform-steady"))).toBeUndefined();
  });
});
