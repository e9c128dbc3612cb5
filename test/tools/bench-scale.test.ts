// The scale benchmark, tiny: two small fleets for a second each, through the
// real parts (fake pods in a worker, the aggregator in its own process, a
// Watch client). It asserts what the benchmark exists to show, not timings:
// at most one snapshot per cycle, every pod in it, work per cycle that grows
// with the pods and no faster.
import { expect, it } from "vitest";
import { runScale } from "../../bench/scale/index.js";
import { scaleTable } from "../../bench/scale/report.js";

it("runs 10 and 20 pods: every pod in the snapshot, at most one push and one scrape per pod per cycle", async () => {
  const report = await runScale({ sizes: [10, 20], warmupS: 0.5, measureS: 1 });
  expect(report.rows.map((r) => r.pods)).toEqual([10, 20]);
  for (const r of report.rows) {
    expect(r.endpoints).toBe(r.pods);
    expect(r.cycles).toBeGreaterThan(0);
    // Counted at the Watch client, against the cycles the aggregator reports (one may straddle the window's edge).
    expect(r.pushesPerCycle * r.cycles).toBeLessThanOrEqual(r.cycles + 1);
    expect(r.pushesPerCycle).toBeGreaterThan(0);
    // Pages served per cycle: each pod at most once (plus the edge), never once per push or per pod squared.
    expect(r.scrapesPerCycle * r.cycles).toBeLessThanOrEqual((r.cycles + 1) * r.pods);
    expect(r.delayMs).not.toBeNull();
    expect(r.pageBytes).toBeGreaterThan(40_000);
    expect(r.intervalMs).toBeGreaterThanOrEqual(report.configuredIntervalMs);
  }
  // The snapshot grows by the same amount per pod.
  const [small, large] = report.rows.map((r) => r.snapshotBytes);
  expect(large).toBeGreaterThan(small * 1.5);
  expect(large).toBeLessThan(small * 2);
  expect(scaleTable(report).rows).toHaveLength(2);
}, 60_000);
