// The capacity tool: each pod group's saturation throughput on the scenario's
// own mix, and the check that the replay really saturated the fleet.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { measureCapacity, type CapacityReport } from "../../bench/capacity/index.js";
import { runBench } from "../../bench/command.js";
import { parseScenario } from "../../bench/scenario.js";

const MIXED = parseScenario(
  `
durationS: 60
models: [{ name: m }]
fleet:
  - { name: fast, model: m, count: 2, speed: 1.0 }
  - { name: slow, model: m, count: 2, speed: 0.35 }
arrivals: { pattern: poisson, rate: 8 }
prompt: { dist: lognormal, median: 600, sigma: 0.6, min: 32, max: 4000 }
output: { dist: lognormal, median: 150, sigma: 0.6, min: 8, max: 1000 }
`,
  "mixed",
  "mixed",
);

describe("bench capacity", () => {
  it("measures each pod group at saturation: a 0.35x pod serves about a third of a fast one", async () => {
    const r = await measureCapacity(MIXED, { multiple: 4 });
    expect(r).toMatchObject({ scenario: "mixed", multiple: 4, requests: expect.any(Number) });
    expect(r.policies.map((p) => p.policy)).toEqual(["round-robin", "oracle"]);
    for (const p of r.policies) {
      const [fast, slow] = p.groups;
      expect(p.unsaturated).toEqual([]);
      expect(p.errors).toBe(0);
      expect(fast.completed + slow.completed).toBe(r.requests);
      expect(p.fleet.requestsPerS).toBeCloseTo(fast.requestsPerS + slow.requestsPerS, 1);
      expect(p.fleet.requestsPerS).toBeLessThan(r.offeredPerS * 4 * 0.8);
    }
    // Round-robin gives both groups the same mix, so their rates compare as their speeds.
    const [fast, slow] = r.policies[0].groups;
    expect(slow.requestsPerS / fast.requestsPerS).toBeGreaterThan(0.25);
    expect(slow.requestsPerS / fast.requestsPerS).toBeLessThan(0.45);
  });

  it("names the pods the replay was not fast enough to saturate", async () => {
    // 9.6 req/s split evenly: more than the slow pods can take, less than the fast ones can.
    const r = await measureCapacity(MIXED, { multiple: 1.2, policies: ["round-robin"] });
    expect(r.policies[0].unsaturated).toEqual(["fast-0", "fast-1"]);
  });

  it("CLI --capacity prints the table and writes capacity.json", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bench-capacity-"));
    const out: string[] = [];
    const err: string[] = [];
    const io = { out: (t: string) => out.push(t), err: (t: string) => err.push(t), errIsTty: false };
    expect(await runBench(["--capacity", "--scenario", "heterogeneous", "--duration", "30", "--policies", "round-robin", "--out", dir], io), err.join("")).toBe(0);
    const report = JSON.parse(readFileSync(join(dir, "heterogeneous", "capacity.json"), "utf8")) as CapacityReport;
    expect(report.policies[0].groups.map((g) => g.group)).toEqual(["h100", "a10g"]);
    expect(out.join("")).toMatch(/capacity of heterogeneous[\s\S]*round-robin\s+a10g\s+4/);
    expect(await runBench(["--capacity", "--scenario", "bursty", "--mode", "live"], io)).toBe(2);
    expect(await runBench(["--scenario", "bursty", "--multiple", "3"], io)).toBe(2);
    expect(err.join("")).toMatch(/--capacity: needs --scenario NAME or --all, in sim mode[\s\S]*--multiple: only with --capacity/);
  });
});
