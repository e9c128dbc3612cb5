// The live benchmark harness (real Envoys, real fake fleet, real time) on a
// tiny scenario: correctness of the harness, not timing.
import { describe, expect, it } from "vitest";
import { runLive } from "../bench/live/index.js";
import { parseScenario } from "../bench/scenario.js";

const scenario = parseScenario(
  `
seed: 7
durationS: 2
models:
  - name: llama-3.1-8b
  - name: qwen3-32b
fleet:
  - { name: fast, model: llama-3.1-8b, count: 2, speed: 1.0 }
  - { name: q, model: qwen3-32b, count: 1, speed: 1.0 }
arrivals: { pattern: poisson, rate: 15 }
prompt: { dist: uniform, min: 16, max: 64 }
output: { dist: uniform, min: 2, max: 6 }
`,
  "tiny live scenario",
  "tiny",
);

describe("live mode", () => {
  it("replays the same trace through ours, Envoy round-robin and least-request, all to completion", async () => {
    const result = await runLive(scenario);
    expect(result.mode).toBe("live");
    expect(result.policies.map((p) => p.policy)).toEqual(["round-robin", "least-request", "ours:default"]);
    const n = result.offered.requests;
    expect(n).toBeGreaterThan(10);
    for (const p of result.policies) {
      expect(p.errors, `${p.policy}: ${JSON.stringify(p.errorsByReason)}`).toBe(0);
      expect(p.completed).toBe(n);
      expect(p.ttftMs!.p50).toBeGreaterThan(0);
      // Every response named the pod that served it, and each pod served its own model only.
      expect(Object.values(p.perPod).reduce((a, b) => a + b, 0)).toBe(n);
      expect(p.perPod["fast-0"] + p.perPod["fast-1"]).toBe(result.policies[0].perPod["fast-0"] + result.policies[0].perPod["fast-1"]);
      expect(p.perPod["fast-0"]).toBeGreaterThan(0);
      expect(p.perPod["fast-1"]).toBeGreaterThan(0);
    }
  }, 120_000);
});
