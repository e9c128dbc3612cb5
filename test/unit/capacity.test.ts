// The capacity learner: a pod's service rate from its inter-token latency
// histogram, alone and fed by the fake engines' /metrics in every dialect.
import { describe, expect, it } from "vitest";
import { CapacityLearner, HYSTERESIS, MEMORY_OBSERVATIONS, MIN_OBSERVATIONS } from "../../host/aggregator/capacity.js";
import { normalise, wantedMetrics, type ItlTotals } from "../../host/aggregator/normalise.js";
import { parsePrometheusText } from "../../host/aggregator/scrape.js";
import type { PodEntry } from "../../host/aggregator/pod-entry.js";
import { parseGatewayConfig, type Engine as EngineName } from "../../host/config.js";
import { Engine } from "../../testing/engine/index.js";
import { FORMAT_ENGINE, MetricsRenderer, type MetricsFormat } from "../../testing/fakeserver/metrics.js";
import { builtSnapshot, podEntry } from "../../testing/fixtures/snapshot-builders.js";

/** Feeds windows of `gaps` token gaps, each with the given mean ITL (seconds); returns the value after each. */
function feed(learner: CapacityLearner, start: ItlTotals, windows: Array<{ gaps: number; meanS: number }>): { totals: ItlTotals; values: number[] } {
  let totals = start;
  const values: number[] = [];
  for (const w of windows) {
    totals = { sumS: totals.sumS + w.gaps * w.meanS, count: totals.count + w.gaps };
    learner.observe(totals);
    values.push(learner.value);
  }
  return { totals, values };
}

/** Whether a published value is as close to the true rate as the hysteresis band and 2-digit rounding allow. */
const withinBand = (value: number, truth: number) => Math.abs(value / truth - 1) <= HYSTERESIS + 0.01;

/** A learner whose memory is full of a steady 10 ms ITL (100 tokens/s per sequence). */
function warmed(): { learner: CapacityLearner; totals: ItlTotals } {
  const learner = new CapacityLearner();
  const start = { sumS: 3, count: 200 };
  learner.observe(start);
  const { totals } = feed(learner, start, Array.from({ length: 20 }, () => ({ gaps: MEMORY_OBSERVATIONS / 10, meanS: 0.01 })));
  return { learner, totals };
}

describe("capacity learner", () => {
  it("is unknown (0) until a first window of enough token gaps, then 1 / mean ITL", () => {
    const learner = new CapacityLearner();
    learner.observe(null); // the engine exports no histogram
    expect(learner.value).toBe(0);
    learner.observe({ sumS: 120, count: 4000 }); // first sight: where the window starts, whatever came before
    expect(learner.value).toBe(0);
    learner.observe({ sumS: 120 + 0.012 * (MIN_OBSERVATIONS - 1), count: 4000 + MIN_OBSERVATIONS - 1 });
    expect(learner.value).toBe(0);
    learner.observe({ sumS: 120 + 0.012 * MIN_OBSERVATIONS, count: 4000 + MIN_OBSERVATIONS });
    expect(learner.value).toBe(83); // 1 / 12 ms, 2 significant digits
  });

  it("reads a busy pod as fast as an idle one of its kind: each window's mean is corrected by the batch it ran", () => {
    // Steps of 10 ms + 0.1 ms per running sequence, as the engine model and vLLM on an H100 have them.
    const itlAt = (running: number) => (10 + 0.1 * running) / 1000;
    const learn = (running: number) => {
      const learner = new CapacityLearner();
      learner.observe({ sumS: 0, count: 0 }, running);
      learner.observe({ sumS: itlAt(running) * MIN_OBSERVATIONS, count: MIN_OBSERVATIONS }, running);
      return learner.value;
    };
    expect(learn(0)).toBe(100);
    for (const running of [20, 100, 256]) expect(learn(running), `${running} running`).toBe(100);
    // A GPU at 0.35x stays at 0.35x whatever its batch.
    const slow = new CapacityLearner();
    slow.observe({ sumS: 0, count: 0 }, 64);
    slow.observe({ sumS: (itlAt(64) / 0.35) * MIN_OBSERVATIONS, count: MIN_OBSERVATIONS }, 64);
    expect(slow.value).toBe(35);
  });

  it("keeps its estimate while the pod is idle", () => {
    const { learner, totals } = warmed();
    expect(learner.value).toBe(100);
    for (let i = 0; i < 100; i++) learner.observe(totals); // no new gaps
    expect(learner.value).toBe(100);
  });

  it("adds up a quiet pod's few gaps per scrape until there are enough", () => {
    const learner = new CapacityLearner();
    learner.observe({ sumS: 0, count: 0 });
    const quiet = feed(learner, { sumS: 0, count: 0 }, Array.from({ length: 12 }, () => ({ gaps: 5, meanS: 0.02 })));
    expect(quiet.values).toEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 50, 50, 50]);
  });

  it("keeps its estimate over a server restart (counters going back), then learns from there", () => {
    const { learner } = warmed();
    learner.observe({ sumS: 0.1, count: 10 });
    expect(learner.value).toBe(100);
    feed(learner, { sumS: 0.1, count: 10 }, Array.from({ length: 50 }, () => ({ gaps: MEMORY_OBSERVATIONS / 5, meanS: 0.02 })));
    expect(withinBand(learner.value, 50)).toBe(true);
  });

  it("does not flip on jitter, even at a rounding boundary", () => {
    const learner = new CapacityLearner();
    learner.observe({ sumS: 0, count: 0 });
    // 84.5 tokens/s rounds to 84 or 85 at 2 digits; the windows jitter ±4% around it.
    const jitter = feed(
      learner,
      { sumS: 0, count: 0 },
      Array.from({ length: 2000 }, (_, i) => ({ gaps: 80, meanS: (1 / 84.5) * (1 + 0.04 * Math.sin(i)) })),
    );
    expect(new Set(jitter.values).size).toBe(1);
    expect(Math.abs(jitter.values[0] - 84.5)).toBeLessThanOrEqual(2);
  });

  it("follows a real change in steps larger than the hysteresis band, never back and forth", () => {
    const { learner, totals } = warmed();
    const slowed = feed(learner, totals, Array.from({ length: 100 }, () => ({ gaps: 1000, meanS: 0.025 })));
    expect(withinBand(slowed.values[slowed.values.length - 1], 40)).toBe(true);
    const steps = [100, ...new Set(slowed.values)];
    expect(steps.length).toBeGreaterThan(2);
    for (let i = 1; i < steps.length; i++) expect(steps[i]).toBeLessThan(steps[i - 1]);
  });
});

/**
 * One fake engine kept at 16 requests in flight (each finished request is
 * replaced at once, prompts of 100-850 tokens, 16-315 output tokens) for
 * `durationMs` of virtual time, scraped every 50 ms through its /metrics
 * text in `format`, as the aggregator reads it. Returns the capacity after
 * each scrape.
 */
function learnFromEngine(speed: number, format: MetricsFormat, durationMs: number): number[] {
  const engine = new Engine({ model: "m", speed }, 0);
  const renderer = new MetricsRenderer(format, false);
  const want = wantedMetrics(FORMAT_ENGINE[format]);
  let seq = 0;
  const submit = (t: number) => {
    const n = seq++;
    engine.submit({ id: `r${n}`, prompt: `r${n} `.padEnd(400 + ((n * 7919) % 3000), "x"), maxTokens: 16 + ((n * 104729) % 300) }, t);
  };
  for (let i = 0; i < 16; i++) submit(0);
  const learner = new CapacityLearner();
  const values: number[] = [];
  for (let scrape = 50; scrape <= durationMs; scrape += 50) {
    for (let t = engine.nextEventTime(); t <= scrape; t = engine.nextEventTime()) {
      for (const ev of engine.advanceTo(t)) if (ev.type === "finished") submit(t);
    }
    engine.advanceTo(scrape);
    const text = renderer.render(engine.metrics(), scrape / 1000);
    learner.observe(normalise(FORMAT_ENGINE[format], parsePrometheusText(text, (n) => want.has(n))).itl);
    values.push(learner.value);
  }
  return values;
}

const lastOf = (values: number[]) => values[values.length - 1];

describe("capacity learned from the fake engines' /metrics", () => {
  it.each(["vllm", "vllm-legacy", "sglang", "tgi"] as const)("%s: a pod at 0.35x speed gets ~0.35x the capacity of a 1.0x pod", (format) => {
    const fast = lastOf(learnFromEngine(1, format, 40_000));
    const slow = lastOf(learnFromEngine(0.35, format, 40_000));
    expect(fast).toBeGreaterThan(0);
    expect(slow / fast).toBeGreaterThan(0.35 * 0.9);
    expect(slow / fast).toBeLessThan(0.35 * 1.1);
  });

  it("changes the value a busy pod publishes only a few times, though every scrape window differs", () => {
    const values = learnFromEngine(1, "vllm", 60_000);
    const changedAt = values.flatMap((v, i) => (i > 0 && v !== values[i - 1] ? [i] : []));
    expect(values).toHaveLength(1200);
    // It climbs while the first (prefill-heavy) windows are averaged out, then holds.
    expect(changedAt.length).toBeLessThan(values.length / 50);
    expect(changedAt.filter((i) => i >= values.length / 2)).toEqual([]);
  });
});

describe("capacity in the snapshot", () => {
  const config = parseGatewayConfig(`
pools:
  - name: learned
    baseModel: a
    endpoints: ["10.0.0.1:8000", "10.0.0.2:8000"]
  - name: configured
    baseModel: b
    endpoints: [{ address: "10.0.1.1:8000", capacity: 0.35 }, "10.0.1.2:8000"]
`);
  /** A pod of `pool` whose scrapes have shown a steady ITL of `itlS` seconds, its batch empty. */
  function scraped(pool: number, address: string, itlS: number): PodEntry {
    const pod = podEntry(config, pool, address);
    for (const itl of [{ sumS: 0, count: 0 }, { sumS: 100 * itlS, count: 100 }]) {
      pod.book({ waiting: 0, running: 0, kvCacheUsage: 0, maxLora: 0, runningAdapters: [], waitingAdapters: [], itl, kvTokens: 0 }, 0);
    }
    return pod;
  }

  it("carries what was learned, unless the pool configures capacities: then configured values only, 1 where none is given", () => {
    const body = builtSnapshot(config, [
      [scraped(0, "10.0.0.1:8000", 0.01), scraped(0, "10.0.0.2:8000", 0.04)],
      [scraped(1, "10.0.1.1:8000", 0.01), scraped(1, "10.0.1.2:8000", 0.04)],
    ]);
    expect(body.pools.map((p) => p.endpoints.map((e) => e.capacity))).toEqual([
      [100, 25],
      [0.35, 1],
    ]);
  });

  it("is 0 (unknown) for a pod the learner knows nothing of", () => {
    const body = builtSnapshot(config, [[scraped(0, "10.0.0.1:8000", 0.01), podEntry(config, 0, "10.0.0.2:8000")]]);
    expect(body.pools[0].endpoints.map((e) => e.capacity)).toEqual([100, 0]);
  });
});
