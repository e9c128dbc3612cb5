// The failover benchmark in its smoke form, through the command line: six
// real stacks (a pod killed, a pod answering 500, the aggregator and then a
// pod gone, a pod hung, one cutting responses, one stalling streams). Checks
// what must hold whatever the timing, with or without the gateway enforcing
// deadlines; the timings themselves are the benchmark's output, not asserted here.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runBench } from "../../bench/command.js";
import { PHASES, type FailoverReport, type PhaseReport } from "../../testing/failover/index.js";
import { planArrivals } from "../../testing/failover/load.js";
import { projectRoot } from "../../host/paths.js";

describe("npm run bench -- --failover --smoke", () => {
  const benchmarksPath = join(projectRoot, "BENCHMARKS.md");
  let dir: string;
  let benchmarksBefore: string;
  let code: number;
  let stdout = "";
  let stderr = "";
  let report: FailoverReport;
  const phase = (name: string): PhaseReport => report.phases.find((p) => p.phase === name)!;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "bench-failover-"));
    benchmarksBefore = readFileSync(benchmarksPath, "utf8");
    code = await runBench(["--failover", "--smoke", "--out", dir], {
      out: (t) => (stdout += t),
      err: (t) => (stderr += t),
      errIsTty: false,
    });
    report = JSON.parse(readFileSync(join(dir, "failover", "failover.json"), "utf8")) as FailoverReport;
  }, 300_000);

  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it("runs every phase on the same seeded arrivals, reports progress and a table, and leaves BENCHMARKS.md alone", () => {
    expect(code, stderr).toBe(0);
    expect(report.smoke).toBe(true);
    expect(report.phases.map((p) => p.phase)).toEqual([...PHASES]);
    const planned = planArrivals(report.settings.seed, report.settings.ratePerS, report.settings.durationS);
    for (const p of report.phases) {
      expect(p.requests.sent, p.phase).toBe(planned.length);
      expect(p.records.map((r) => r.stream)).toEqual(planned.map((r) => r.stream));
      expect(p.requests.sentAfterFault, p.phase).toBeGreaterThan(0);
      expect(p.requests.ok + p.errors.total).toBe(p.requests.sent);
      // Every request that went wrong is in exactly one class.
      expect(p.errors.httpStatus + p.errors.noResponse + p.errors.broken + p.errors.timeouts).toBe(p.errors.total);
      expect(stdout).toContain(`| ${p.title} (\`${p.fault.pod}\`) |`);
    }
    expect(stderr).toMatch(/^\[failover\] pod-killed: killed llama-\d at /m);
    expect(stderr).toMatch(/^\[failover\] aggregator-then-pod-killed: aggregator stopped at /m);
    expect(readFileSync(benchmarksPath, "utf8")).toBe(benchmarksBefore);
  });

  it("a killed pod serves nothing after its kill; only streams it was sending break, and nothing fails before a response", () => {
    for (const name of ["pod-killed", "aggregator-then-pod-killed"]) {
      const p = phase(name);
      expect(p.faultyPod.servedAfterGrace, name).toBe(0);
      expect(p.errors.httpStatus + p.errors.noResponse + p.errors.timeouts, name).toBe(0);
      expect(p.errors.brokenElsewhere, name).toBe(0);
      for (const r of p.records.filter((x) => x.error)) {
        expect(r.stream).toBe(true);
        expect(r.servedBy).toBe(p.fault.pod);
        expect(r.outputTokens).toBeLessThan(r.maxTokens);
      }
    }
  });

  it("without the aggregator the filter routes blind when the pod dies", () => {
    const p = phase("aggregator-then-pod-killed");
    expect(p.fault.healthAtFault).toBe("degraded");
    expect(p.envoy.routedBlind).toBeGreaterThan(0);
  });

  it("a pod answering 500 costs clients nothing, and once the filter's ledger ejects it no request reaches it", () => {
    const p = phase("pod-500");
    expect(p.errors.total).toBe(0);
    // It advertises the emptiest queue, so the filter tries it until its ledger knows better:
    // a streak of ejectAfterFailures failed requests ejects it. How long a streak forms depends on
    // the timing (the scrape may see the pod fail first; Envoy may retry one request on it twice,
    // one failure to the ledger; a stream begun before the fault may end well between two
    // failures), so what is asserted is that the failures reached the ledger and that no attempt
    // reached the pod while the ledger had it ejected.
    expect(p.faultyPod.attemptsAfterFault).toBeGreaterThanOrEqual(1);
    expect(p.faultyPod.ledger!.longestStreak).toBeGreaterThanOrEqual(1);
    expect(p.faultyPod.ledger!.attemptsWhileEjected).toBe(0);
    // Each 500 was retried on another pod.
    expect(p.envoy.retriesSucceeded).toBeGreaterThanOrEqual(p.faultyPod.attemptsAfterFault);
  });

  it("a hung pod draws attempts it never answers; its first failure shows a first-byte deadline after the first", () => {
    const p = phase("pod-hung");
    const fp = p.faultyPod;
    expect(fp.attemptsAfterFault).toBeGreaterThan(0);
    expect(fp.servedAfterGrace).toBe(0);
    // The gateway may give up a little before the bench's own clock says the deadline passed.
    const wait = fp.firstFailureMs! - fp.attemptTimesMs[0];
    expect(wait).toBeGreaterThan(report.settings.deadlines.firstByteMs - 100);
    expect(wait).toBeLessThanOrEqual(report.settings.deadlines.firstByteMs + 1);
    expect(fp.attemptsAfterFirstFailure).toBe(fp.attemptTimesMs.filter((t) => t > fp.firstFailureMs!).length);
  });

  it("a pod cutting responses fails clients only after their 200, on that pod", () => {
    const p = phase("pod-breaking-responses");
    expect(p.errors.broken).toBeGreaterThan(0);
    expect(p.errors.total).toBe(p.errors.broken);
    expect(p.errors.brokenElsewhere).toBe(0);
    expect(p.faultyPod.firstFailureMs).not.toBeNull();
  });

  it("a pod stalling streams fails only streams it served, after their first token", () => {
    const p = phase("pod-stalling-streams");
    expect(p.errors.total).toBeGreaterThan(0);
    for (const r of p.records.filter((x) => x.error)) {
      expect(["timeout", "broken"]).toContain(r.error!.kind);
      expect(r.stream).toBe(true);
      expect(r.servedBy).toBe(p.fault.pod);
      expect(r.outputTokens).toBeLessThanOrEqual(1);
    }
    expect(p.faultyPod.firstFailureMs).toBeGreaterThanOrEqual(report.settings.deadlines.streamIdleMs - 100);
  });
});
