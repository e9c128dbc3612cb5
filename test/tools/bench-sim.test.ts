// The benchmark simulator: determinism, the policies' basic behaviour, the
// staleness model, and a CLI smoke run. Correctness of the harness, not timing.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { normalise, wantedMetrics } from "../../host/aggregator/normalise.js";
import { DEFAULT_WEIGHTS } from "../../host/config.js";
import { parsePrometheusText } from "../../host/aggregator/scrape.js";
import { MetricsRenderer } from "../../testing/fakeserver/metrics.js";
import { runBench } from "../../bench/command.js";
import { POLICIES } from "../../bench/policies/index.js";
import { PrefixIndex, prefixHashes } from "../../bench/policies/prefix-index.js";
import { loraAffinity, saturated } from "../../bench/policies/reference.js";
import { loadScenario, parseScenario, type Scenario } from "../../bench/scenario.js";
import { gatewayConfig } from "../../bench/sim/aggregator.js";
import { SimFleet } from "../../bench/sim/fleet.js";
import { scrapePod } from "../../bench/sim/scrape.js";
import { replayPolicy, runSim } from "../../bench/sim/simulator.js";
import { enginePrompt, generateTrace } from "../../bench/sim/workload.js";
import { percentile } from "../../bench/percentiles.js";
import { e2eOf, isTimeout, ttftOf, type PolicyResult, type ScenarioResult } from "../../bench/types.js";
import { roundRobin } from "../../bench/policies/envoy.js";
import type { PolicySpec } from "../../bench/policies/index.js";

const TINY = parseScenario(
  `
description: three pods, one slow, a few requests
durationS: 12
models: [{ name: m }]
fleet:
  - { name: fast, model: m, count: 2, speed: 1.0 }
  - { name: slow, model: m, count: 1, speed: 0.35 }
arrivals: { pattern: poisson, rate: 5 }
sharedPrefix: { fraction: 0.5, groups: 3, tokens: 300 }
prompt: { dist: lognormal, median: 300, sigma: 0.5, min: 16, max: 1500 }
output: { dist: lognormal, median: 40, sigma: 0.5, min: 4, max: 200 }
`,
  "tiny",
  "tiny",
);

const policy = (r: ScenarioResult, name: string): PolicyResult => r.policies.find((p) => p.policy === name)!;

/** The heterogeneous scenario, shortened. */
const heterogeneous = (durationS: number): Scenario => ({ ...loadScenario("heterogeneous"), durationS });

describe("bench simulator", () => {
  it("gives identical results for the same seed and different ones for another", async () => {
    const a = await runSim(TINY, { seed: 7 });
    const b = await runSim(TINY, { seed: 7 });
    expect(JSON.stringify(a)).toBe(JSON.stringify(b));
    const c = await runSim(TINY, { seed: 8 });
    expect(JSON.stringify(c)).not.toBe(JSON.stringify(a));
  });

  it("completes every request of a tiny scenario under every policy", async () => {
    const r = await runSim(TINY);
    expect(r.policies.map((p) => p.policy)).toEqual(POLICIES.map((p) => p.name));
    expect(r.offered.requests).toBeGreaterThan(30);
    for (const p of r.policies) {
      expect({ policy: p.policy, completed: p.completed, errors: p.errors }).toEqual({ policy: p.policy, completed: r.offered.requests, errors: 0 });
      expect(p.ttftMs!.p50).toBeGreaterThan(0);
      expect(p.ttftMs!.p99).toBeGreaterThanOrEqual(p.ttftMs!.p95);
      expect(p.e2eMs!.p50).toBeGreaterThan(p.ttftMs!.p50);
    }
  });

  it("spreads round-robin evenly (per Envoy worker, so within one request per worker)", async () => {
    const r = await runSim(TINY, { policies: ["round-robin"] });
    const counts = Object.values(r.policies[0].perPod);
    expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(TINY.gateway.workers);
  });

  it("lets the oracle do at least as well as random on a heterogeneous fleet", async () => {
    const r = await runSim(heterogeneous(40), { policies: ["random", "oracle"] });
    expect(policy(r, "oracle").ttftMs!.p95).toBeLessThanOrEqual(policy(r, "random").ttftMs!.p95);
    expect(policy(r, "oracle").ttftMs!.p50).toBeLessThanOrEqual(policy(r, "random").ttftMs!.p50);
  });

  it("with scrapes that never come, ours still balances on its own in-flight counts, which follow completions", async () => {
    const base = heterogeneous(40);
    const fresh = await runSim(base, { policies: ["round-robin", "ours:default"] });
    // Without admission: a view this old that still counts as fresh (no real one does past staleAfterMs) shows
    // every request sent since its scrape as still starting, so admission refuses what the fleet could serve,
    // and the wait counts from first arrival. Balancing is what this checks.
    const blind = await runSim({ ...base, gateway: { ...base.gateway, scrapeIntervalMs: 1e9, staleAfterMs: 2e9 } }, { policies: ["ours:default:no-admission"] });
    const rr = policy(fresh, "round-robin").ttftMs!.p95;
    const good = policy(fresh, "ours:default").ttftMs!.p95;
    const stale = blind.policies[0].ttftMs!.p95;
    expect(good).toBeLessThan(rr / 3);
    // A count that only grew (picks counted per snapshot, never released) would rotate
    // over the pods like round-robin; released counts favour the pods that finish sooner.
    expect(stale).toBeLessThan(rr / 2);
    const perPod = blind.policies[0].perPod;
    const fast = Object.entries(perPod).filter(([pod]) => pod.startsWith("h100")).reduce((s, [, n]) => s + n, 0);
    const slow = Object.entries(perPod).filter(([pod]) => pod.startsWith("a10g")).reduce((s, [, n]) => s + n, 0);
    expect(fast).toBeGreaterThan(1.5 * slow);
  });

  it("counts timeouts in the latency percentiles, at the drain deadline", async () => {
    // One pod with 8 seats offered far more than it can serve: most requests are still queued when the client gives up.
    const overloaded = (drainLimitS: number) =>
      parseScenario(
        `
durationS: 6
drainLimitS: ${drainLimitS}
engine: { maxNumSeqs: 8 }
models: [{ name: m }]
fleet: [{ name: gpu, model: m, count: 1 }]
arrivals: { pattern: poisson, rate: 15 }
prompt: { dist: fixed, value: 1500 }
output: { dist: fixed, value: 300 }
`,
        "overloaded",
      );
    const cut = (await runSim(overloaded(3), { policies: ["round-robin"] })).policies[0];
    expect(cut.timeouts).toBeGreaterThan(cut.requests / 2);
    expect(cut.completed).toBeGreaterThan(0);
    expect(cut.completed + cut.timeouts + cut.errors).toBe(cut.requests);
    expect(cut.errorsByReason).toEqual({});

    // The same trace left to finish: each request that would finish after the deadline counts at the deadline.
    const scenario = overloaded(900);
    const trace = generateTrace(scenario, scenario.seed);
    const full = (await replayPolicy(scenario, trace, roundRobin, scenario.seed)).records;
    expect(full.every((r) => r.error === undefined)).toBe(true);
    const deadline = trace.requests.at(-1)!.arrivalMs + 3000;
    const late = (r: (typeof full)[number]) => e2eOf(r) > deadline - r.atMs;
    const capped = (f: (r: (typeof full)[number]) => number) =>
      full.map((r) => (late(r) ? deadline - r.atMs : f(r))).sort((a, b) => a - b);
    const ttft = capped(ttftOf);
    const e2e = capped(e2eOf);
    expect(cut.ttftMs!.p95).toBeCloseTo(percentile(ttft, 0.95), 2);
    expect(cut.ttftMs!.p50).toBeCloseTo(percentile(ttft, 0.5), 2);
    expect(cut.e2eMs!.p99).toBeCloseTo(percentile(e2e, 0.99), 2);
    expect(cut.e2eMs!.max).toBeCloseTo(e2e.at(-1)!, 2);
    // Dropping the timeouts would have reported the few lucky requests only.
    const completedOnly = full.filter((r) => !late(r)).map(ttftOf).sort((a, b) => a - b);
    expect(cut.ttftMs!.p95).toBeGreaterThan(2 * percentile(completedOnly, 0.95));
    expect(cut.ttftCdf.at(-1)![0]).toBe(cut.ttftMs!.max);
  });

  it("tells subscribers when each request leaves its pod (finished, timed out, or refused)", async () => {
    const s = parseScenario(
      `
durationS: 4
drainLimitS: 1
models: [{ name: m }]
fleet: [{ name: gpu, model: m, count: 2 }]
arrivals: { pattern: poisson, rate: 20 }
prompt: { dist: fixed, value: 800 }
output: { dist: fixed, value: 100 }
`,
      "hook",
    );
    const seen: Array<{ index: number; pod: number; t: number; inFlight: number }> = [];
    const spec: PolicySpec = {
      name: "pod-by-parity",
      description: "test policy",
      create({ fleet }) {
        fleet.onFinished((r, pod, t) => seen.push({ index: r.index, pod, t, inFlight: fleet.inFlight(pod) }));
        return { decisionDelayMs: 0, route: ({ request }) => ({ pod: request.index % 2 }) };
      },
    };
    const trace = generateTrace(s, 1);
    const fleet = await replayPolicy(s, trace, spec, 1);
    const deadline = trace.requests.at(-1)!.arrivalMs + 1000;
    expect(seen).toHaveLength(trace.requests.length);
    expect(new Set(seen.map((x) => x.index)).size).toBe(trace.requests.length);
    for (const x of seen) {
      const record = fleet.records[x.index];
      expect(x.pod).toBe(x.index % 2);
      expect(x.t).toBeCloseTo(isTimeout(record) ? deadline : record.atMs + e2eOf(record), 6);
    }
    expect(fleet.records.some(isTimeout)).toBe(true);
    expect(fleet.inFlight(0) + fleet.inFlight(1)).toBe(0);

    // A request the pod refuses up front leaves it at once.
    const small = new SimFleet({ ...s, engine: { maxModelLen: 512 } }, trace.requests);
    const left: number[] = [];
    small.onFinished((_, pod, t) => left.push(pod, t));
    small.submit(trace.requests[0], 1, enginePrompt(trace, trace.requests[0]), 5);
    expect(small.records[0].error).toMatchObject({ kind: "status", status: 400, code: "context_length_exceeded" });
    expect(left).toEqual([1, 5]);
  });

  it("reports adapter loads, preemptions and each pod's share per policy", async () => {
    const s = parseScenario(
      `
durationS: 20
engine: { maxLoras: 1, numGpuBlocks: 400 }
models: [{ name: m, adapters: { tiers: [{ count: 4, share: 1 }] } }]
fleet: [{ name: gpu, model: m, count: 3 }]
arrivals: { pattern: poisson, rate: 6 }
prompt: { dist: uniform, min: 200, max: 1200 }
output: { dist: uniform, min: 50, max: 400 }
`,
      "lora",
    );
    const trace = generateTrace(s, s.seed);
    const fleet = await replayPolicy(s, trace, roundRobin, s.seed);
    const loads = fleet.pods.reduce((sum, p) => sum + p.engine.metrics().counters.loraLoads, 0);
    const preemptions = fleet.pods.reduce((sum, p) => sum + p.engine.metrics().counters.preemptions, 0);
    const r = (await runSim(s, { policies: ["round-robin"] })).policies[0];
    expect(loads).toBeGreaterThan(0);
    expect(preemptions).toBeGreaterThan(0);
    expect(r).toMatchObject({ adapterLoads: loads, preemptions, adapterLoadsPer1k: expect.closeTo((loads / r.requests) * 1000, 2) });
    expect(Object.keys(r.podShare)).toEqual(["gpu-0", "gpu-1", "gpu-2"]);
    for (const [pod, share] of Object.entries(r.podShare)) expect(share).toBeCloseTo(r.perPod[pod] / r.requests, 3);
  });

  it("tells the gateway each pool's batch slots as its simulated engines have them", () => {
    const s = parseScenario(
      `
durationS: 1
engine: { maxNumSeqs: 48 }
models: [{ name: m }, { name: n }]
fleet: [{ name: a, model: m, count: 2 }, { name: b, model: n, count: 1, engine: { maxNumSeqs: 12 } }]
arrivals: { pattern: poisson, rate: 1 }
prompt: { dist: fixed, value: 10 }
output: { dist: fixed, value: 10 }
`,
      "slots",
    );
    const trace = generateTrace(s, 1);
    const config = gatewayConfig(s, trace, new SimFleet(s, trace.requests), DEFAULT_WEIGHTS);
    expect(config.pools.map((p) => p.batchSlots)).toEqual([48, 12]);
  });

  it("reads the same numbers as the aggregator does from the /metrics text", () => {
    const s = parseScenario(
      `
durationS: 1
engine: { maxLoras: 2 }
models: [{ name: m, adapters: { tiers: [{ count: 3, share: 1 }] } }]
fleet: [{ name: gpu, model: m, count: 1 }]
arrivals: { pattern: poisson, rate: 40 }
prompt: { dist: uniform, min: 500, max: 3000 }
output: { dist: fixed, value: 50 }
`,
      "lora",
    );
    const trace = generateTrace(s, 3);
    const fleet = new SimFleet(s, trace.requests);
    const renderer = new MetricsRenderer("vllm", true);
    const want = wantedMetrics("vllm");
    for (const r of trace.requests) fleet.submit(r, 0, enginePrompt(trace, r), r.arrivalMs);
    for (const t of [0, 100, 400, 900]) {
      fleet.advanceTo(Math.max(t, trace.requests[trace.requests.length - 1].arrivalMs));
      const pod = fleet.pods[0];
      const text = renderer.render(pod.engine.metrics(), pod.engine.now / 1000);
      expect(scrapePod(pod)).toEqual(normalise("vllm", parsePrometheusText(text, (n) => want.has(n))));
    }
    expect(scrapePod(fleet.pods[0]).waiting).toBeGreaterThan(0);
  });

  it("the reference's prefix index matches leading blocks only, stops at the first block no pod has, and forgets LRU-first", () => {
    const index = new PrefixIndex([1000, 1000, 4]);
    const doc = "x".repeat(64 * 6);
    const hashes = prefixHashes(doc, "m");
    expect(hashes).toHaveLength(6);
    expect(prefixHashes(doc, "other")[0]).not.toBe(hashes[0]);
    index.add(0, hashes.slice(0, 2));
    index.add(1, [hashes[0], hashes[1], hashes[2]]);
    index.add(0, [hashes[4]]); // not reachable: block 3 is missing everywhere
    expect(index.match(hashes, [0, 1, 2])).toEqual([2, 3, 0]);
    index.add(2, hashes); // capacity 4 keeps the last four blocks only
    expect(index.match(hashes, [2])).toEqual([0]);
    expect(prefixHashes("y".repeat(64 * 300), "m")).toHaveLength(256);
  });

  it("the reference as shipped: LoRA affinity 1 / 0.8 / 0.6 / 0, and a saturation detector that refuses only Sheddable, only when every pod is saturated", async () => {
    const m = { waiting: 0, running: 1, kvCacheUsage: 0.1, maxLora: 2, runningAdapters: ["a"], waitingAdapters: [] as string[], itl: { sumS: 0, count: 0 }, kvTokens: 1 };
    expect(loraAffinity(m, "a")).toBe(1);
    expect(loraAffinity(m, "b")).toBe(0.8);
    expect(loraAffinity({ ...m, waitingAdapters: ["b"] }, "b")).toBe(0.6);
    expect(loraAffinity({ ...m, waitingAdapters: ["c"] }, "b")).toBe(0);
    expect(saturated(m, 50)).toBe(false);
    expect(saturated({ ...m, waiting: 5 }, 50)).toBe(true);
    expect(saturated({ ...m, kvCacheUsage: 0.8 }, 50)).toBe(true);
    expect(saturated(m, 201)).toBe(true);

    const overloaded = { ...loadScenario("overload"), durationS: 150 };
    const r = (await runSim(overloaded, { policies: ["reference"] })).policies[0];
    expect(r.admission.byClass.sheddable.refused).toBeGreaterThan(0);
    expect(r.admission.byClass.critical.refused + r.admission.byClass.standard.refused).toBe(0);
    // It sets no Retry-After: the client retries as the OpenAI SDKs do (0.5 s, then 1 s); what is still
    // refused then is final and counts at the deadline.
    expect(r.admission.total.retried).toBe(r.admission.total.refused);
    expect(r.completed).toBe(r.requests - r.admission.total.finalRefused);
    const calm = (await runSim({ ...loadScenario("uniform-steady"), durationS: 60 }, { policies: ["reference"] })).policies[0];
    expect(calm.firstRefusedShare).toBe(0);
  });

  it("CLI smoke run writes JSON with every policy", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bench-cli-"));
    const json = join(dir, "out.json");
    const out: string[] = [];
    const err: string[] = [];
    const code = await runBench(["--smoke", "--scenario", "uniform-steady", "--out", dir, "--json", json], {
      out: (t) => out.push(t),
      err: (t) => err.push(t),
      errIsTty: false,
    });
    expect(code, err.join("")).toBe(0);
    const result = JSON.parse(readFileSync(json, "utf8")) as ScenarioResult;
    expect(result).toMatchObject({ scenario: "uniform-steady", mode: "sim", durationS: 10 });
    expect(result.policies.map((p) => p.policy)).toEqual(POLICIES.map((p) => p.name));
    expect(readFileSync(join(dir, "uniform-steady", "ttft-cdf.svg"), "utf8")).toMatch(/^<svg[^>]*>/);
    expect(readFileSync(join(dir, "uniform-steady", "ttft-timeline.svg"), "utf8")).toContain("p95 TTFT over time");
    expect(out.join("")).toContain("p95 TTFT vs RR");
    expect(err.join("")).toContain("[uniform-steady] oracle");
  });

  it("CLI rejects bad arguments clearly", async () => {
    const err: string[] = [];
    const io = { out: () => {}, err: (t: string) => err.push(t), errIsTty: false };
    expect(await runBench(["--scenario", "tiny", "--seed", "1.5"], io)).toBe(2);
    expect(await runBench(["--scenario", "uniform-steady", "--policies", "nope"], io)).toBe(2);
    expect(await runBench(["--scenario", "no-such-file.yaml"], io)).toBe(1);
    expect(err.join("")).toMatch(/--seed: expected an integer[\s\S]*--policies: unknown policy nope[\s\S]*no-such-file\.yaml: cannot read file/);
  });
});
