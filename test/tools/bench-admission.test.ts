// Admission in the benchmark: the simulated client's retry-once on
// a 429 with Retry-After (against a fake policy that refuses), and the
// report's figures on hand-built records. Cheap: no native router.
import { describe, expect, it } from "vitest";
import { admissionSummary, criticalWhileSheddable, stepSummary, ttftWindows } from "../../bench/admission.js";
import type { PolicySpec } from "../../bench/policies/index.js";
import { roundRobin } from "../../bench/policies/envoy.js";
import { admissionTable, onOffRows, onOffTable, stepWindowsTable } from "../../bench/report/admission-table.js";
import { parseScenario } from "../../bench/scenario.js";
import { replayPolicy, runDeadlineMs, runSim } from "../../bench/sim/simulator.js";
import { generateTrace } from "../../bench/sim/workload.js";
import { policyResult } from "../../bench/stats.js";
import { e2eOf, ttftOf, type Priority, type RunRecord, type ScenarioResult } from "../../bench/types.js";

const SCENARIO = parseScenario(
  `
durationS: 10
models: [{ name: m }]
fleet: [{ name: gpu, model: m, count: 2 }]
arrivals: { pattern: poisson, rate: 6 }
prompt: { dist: fixed, value: 200 }
output: { dist: fixed, value: 20 }
classes: { critical: 0.2, standard: 0.5, sheddable: 0.3 }
`,
  "admission",
  "admission",
);

/**
 * Refuses every first attempt of a Sheddable request (Retry-After 2 s), and
 * every attempt of requests whose index is a multiple of 5 (Retry-After
 * 1.5 s); Critical requests whose index is a multiple of 7 get a 429 without
 * Retry-After. Records each call.
 */
function refusingPolicy(calls: Array<{ index: number; t: number }>): PolicySpec {
  return {
    name: "refuser",
    description: "test policy that refuses",
    create() {
      const seen = new Set<number>();
      return {
        decisionDelayMs: 0.1,
        route({ request }, now) {
          calls.push({ index: request.index, t: now });
          const retry = seen.has(request.index);
          seen.add(request.index);
          if (request.index % 5 === 0) return { status: 429, message: "saturated", retryAfterS: 1.5 };
          if (request.priority === "critical" && request.index % 7 === 0) return { status: 429, message: "saturated" };
          if (request.priority === "sheddable" && !retry) return { status: 429, message: "saturated", retryAfterS: 2 };
          return { pod: request.index % 2 };
        },
      };
    },
  };
}

describe("simulated client", () => {
  it("retries a 429 as the OpenAI SDKs do: twice, after its Retry-After or else after 0.5 s then 1 s less jitter, with the same request; the third refusal is final", async () => {
    const trace = generateTrace(SCENARIO, 1);
    const calls: Array<{ index: number; t: number }> = [];
    const finished = new Map<number, number>();
    const spec = refusingPolicy(calls);
    const fleet = await replayPolicy(SCENARIO, trace, {
      ...spec,
      create(env) {
        env.fleet.onFinished((r, _pod, t) => finished.set(r.index, t));
        return spec.create(env);
      },
    }, 1);
    expect(trace.requests.length).toBeGreaterThan(40);
    let retried = 0;
    for (const r of trace.requests) {
      const rec = fleet.records[r.index];
      const mine = calls.filter((c) => c.index === r.index);
      expect(rec.priority).toBe(r.priority);
      expect(mine[0].t).toBe(r.arrivalMs);
      if (r.index % 5 === 0) {
        // Refused three times: retried 1.5 s and 3 s after the first, then final.
        expect(mine.map((c) => c.t)).toEqual([r.arrivalMs, r.arrivalMs + 1500, r.arrivalMs + 3000]);
        expect(rec).toMatchObject({ firstRefusal: { retryAfterS: 1.5, retryArrivalsMs: [r.arrivalMs + 1500, r.arrivalMs + 3000] }, error: { kind: "status", status: 429 }, servedBy: null });
        retried++;
      } else if (r.priority === "critical" && r.index % 7 === 0) {
        // No Retry-After: the SDK's backoff, 0.5 s then 1 s, each less up to 25%.
        expect(mine).toHaveLength(3);
        const [first, second] = [mine[1].t - mine[0].t, mine[2].t - mine[1].t];
        expect(first).toBeGreaterThanOrEqual(375);
        expect(first).toBeLessThanOrEqual(500);
        expect(second).toBeGreaterThanOrEqual(750);
        expect(second).toBeLessThanOrEqual(1000);
        expect(rec).toMatchObject({ firstRefusal: { retryAfterS: null }, error: { kind: "status", status: 429 } });
        expect(rec.firstRefusal!.retryArrivalsMs).toEqual([mine[1].t, mine[2].t]);
        retried++;
      } else if (r.priority === "sheddable") {
        expect(mine.map((c) => c.t)).toEqual([r.arrivalMs, r.arrivalMs + 2000]);
        expect(rec).toMatchObject({ firstRefusal: { retryAfterS: 2, retryArrivalsMs: [r.arrivalMs + 2000] }, error: undefined, servedBy: `gpu-${r.index % 2}` });
        // Latencies run from the retry's arrival: it ended e2e after the retry came in.
        expect(rec.sentMs).toBe(r.arrivalMs + 2000);
        expect(rec.sentMs + e2eOf(rec)).toBeCloseTo(finished.get(r.index)!, 6);
        expect(ttftOf(rec)).toBeGreaterThan(0.1);
        expect(ttftOf(rec)).toBeLessThan(e2eOf(rec));
        retried++;
      } else {
        expect(mine).toHaveLength(1);
        expect(rec.firstRefusal).toBeUndefined();
        expect(rec.error).toBeUndefined();
        expect(rec.atMs + e2eOf(rec)).toBeCloseTo(finished.get(r.index)!, 6);
      }
    }
    expect(retried).toBeGreaterThan(10);

    // The summary counts the same.
    const meta = { policy: "refuser", description: "", podNames: ["gpu-0", "gpu-1"], durationS: 10, deadlineMs: runDeadlineMs(SCENARIO, trace) };
    const a = policyResult(meta, fleet.records).admission;
    const shed = trace.requests.filter((r) => r.priority === "sheddable");
    const fifths = trace.requests.filter((r) => r.index % 5 === 0);
    const shedOk = shed.filter((r) => r.index % 5 !== 0);
    expect(a.total.retried).toBe(retried);
    expect(a.total.retriedCompleted).toBe(shedOk.length);
    expect(a.retrySuccess).toBeCloseTo(shedOk.length / retried, 3);
    expect(a.byClass.sheddable).toMatchObject({ requests: shed.length, refused: shed.length, retried: shed.length, retriedCompleted: shedOk.length });
    expect(a.total.finalRefused).toBe(fifths.length + trace.requests.filter((r) => r.priority === "critical" && r.index % 7 === 0 && r.index % 5 !== 0).length);
    expect(a.retryAfterS).toEqual({ min: 1.5, p50: expect.any(Number), max: 2 });
  });

  it("never retries for a policy that does not refuse, and keeps every baseline's records as they were", async () => {
    const trace = generateTrace(SCENARIO, 1);
    const fleet = await replayPolicy(SCENARIO, trace, roundRobin, 1);
    for (const rec of fleet.records) {
      expect(rec.firstRefusal).toBeUndefined();
      expect(rec.error).toBeUndefined();
    }
    const r = await runSim(SCENARIO, { policies: ["round-robin"] });
    expect(r.policies[0].admission).toMatchObject({ total: { refused: 0, retried: 0 }, retrySuccess: null, criticalWhileSheddable: 0, refusalsPerS: [] });
  });
});

/** The hand-built runs' deadline: where a failed request counts. */
const DEADLINE_MS = 100_000;

/** A hand-built record: admitted unless `finalError` ("429", "404 model_not_found"), TTFT `ttft` from the admitted attempt. */
function rec(atS: number, priority: Priority, o: { ttft?: number; refusedFirst?: number | null; retryAtS?: number; finalError?: string } = {}): RunRecord {
  const r: RunRecord = { atMs: atS * 1000, priority, sentMs: atS * 1000, servedBy: "gpu-0", promptTokens: 10, cachedTokens: 0, outputTokens: 5 };
  if (o.refusedFirst !== undefined) r.firstRefusal = { retryAfterS: o.refusedFirst, retryArrivalsMs: [] };
  if (o.retryAtS !== undefined) {
    r.firstRefusal!.retryArrivalsMs.push(o.retryAtS * 1000);
    r.sentMs = o.retryAtS * 1000;
  }
  if (o.finalError !== undefined) {
    const [status, code] = o.finalError.split(" ");
    r.error = { kind: "status", status: Number(status), ...(code ? { code } : {}), message: o.finalError };
    r.servedBy = null;
  } else {
    r.firstTokenMs = r.sentMs + (o.ttft ?? 100);
    r.endMs = r.firstTokenMs + 500;
  }
  return r;
}

describe("admission figures", () => {
  it("counts a Critical refusal only in a second in which a Sheddable attempt got in", () => {
    const records = [
      rec(1.2, "critical", { refusedFirst: 1, retryAtS: 2.2 }), // refused in second 1; retry admitted in second 2
      rec(1.9, "sheddable"), // admitted in second 1: the refusal above counts
      rec(3.1, "critical", { refusedFirst: 2, retryAtS: 5.5, finalError: "429" }), // second 3: no Sheddable admitted; the retry's refusal in second 5 counts
      rec(3.5, "sheddable", { refusedFirst: 1, retryAtS: 4.5, finalError: "429 rate_limited" }), // refused both times: never in
      rec(5.1, "sheddable", { refusedFirst: 0.2, retryAtS: 5.3 }), // its retry got in during second 5
      rec(7.0, "critical", { refusedFirst: 1, retryAtS: 8.0 }),
      rec(6.99, "sheddable"), // second 6, not 7
      rec(9.5, "critical", { finalError: "404 model_not_found" }), // not a refusal
      rec(9.6, "sheddable"),
    ];
    expect(criticalWhileSheddable(records)).toBe(2);
    const a = admissionSummary(records, DEADLINE_MS);
    expect(a.criticalWhileSheddable).toBe(2);
    expect(a.byClass.critical).toEqual({ requests: 4, refused: 3, retried: 3, retriedCompleted: 2, finalRefused: 1 });
    expect(a.byClass.sheddable).toEqual({ requests: 5, refused: 2, retried: 2, retriedCompleted: 1, finalRefused: 1 });
    expect(a.total).toMatchObject({ refused: 5, retried: 5, retriedCompleted: 3, finalRefused: 2 });
    expect(a.retrySuccess).toBe(0.6);
    // Refusals per second, every attempt: seconds 1, 3, 4 (retry), 5 (critical retry and sheddable first), 7.
    expect(a.refusalsPerS).toEqual([
      { t: 1, n: 1 },
      { t: 3, n: 2 },
      { t: 4, n: 1 },
      { t: 5, n: 2 },
      { t: 7, n: 1 },
    ]);
    // A retried request's TTFT from its first attempt adds the wait.
    expect(a.retriedTtftMs!.fromRetry.max).toBe(100);
    expect(a.retriedTtftMs!.fromFirstAttempt.max).toBe(1100);
  });

  it("finds the base p95, the step's peak and the first window back within 1.25x", () => {
    const step = { baseEndS: 20, stepStartS: 20, stepEndS: 40 };
    const ttftAt = (t: number) => (t < 20 ? 100 : t < 40 ? 180 : t < 50 ? 400 : t < 55 ? 124 : 110);
    const records: RunRecord[] = [];
    for (let t = 0; t < 70; t += 0.25) records.push(rec(t, "standard", { ttft: ttftAt(t) }));
    // A request counts where it first arrived, its wait for the retry included: this one, in the base, at 1.18 s.
    records.push(rec(19.5, "standard", { refusedFirst: 1, retryAtS: 20.5, ttft: 180 }));
    // Refused for good: it counts at the deadline, in the window it arrived in (one value of 21 there: not the p95).
    records.push(rec(41, "sheddable", { refusedFirst: 3, retryAtS: 44, finalError: "429" }));
    const windows = ttftWindows(records, DEADLINE_MS);
    expect(windows.find((w) => w.t === 15)).toMatchObject({ n: 21, p95: 100 });
    expect(windows.find((w) => w.t === 20)!.n).toBe(20);
    expect(windows.find((w) => w.t === 40)).toMatchObject({ n: 21, p95: 400 });
    expect(Math.max(...ttftWindows([rec(41, "sheddable", { finalError: "429" })], DEADLINE_MS).map((w) => w.p95))).toBe(DEADLINE_MS - 41_000);
    const s = stepSummary(records, DEADLINE_MS, windows, step);
    expect(s).toMatchObject({ baseP95Ms: 100, stepPeakP95Ms: 180, stepPeakRatio: 1.8, refusalsBefore: 1, refusalsDuring: 0, refusalsAfter: 2, refusalsAfterFirstAttempts: 1 });
    // 40-45 and 45-50 at 400 ms; 50-55 at 124 ms is within 125: back 10 s after the step's end.
    expect(s.recoveryS).toBe(10);
    // Never back: no recovery.
    const stuck = records.map((r) => (r.atMs >= 40_000 && r.firstTokenMs !== undefined ? { ...r, firstTokenMs: r.sentMs + 400 } : r));
    expect(stepSummary(stuck, DEADLINE_MS, ttftWindows(stuck, DEADLINE_MS), step)).toMatchObject({ baseP95Ms: 100, recoveryS: null });
  });

  it("tables the figures per policy and seed, and ours with admission against without", () => {
    const step = { baseEndS: 20, stepStartS: 20, stepEndS: 40 };
    const records = (slow: number, refuse: boolean): RunRecord[] =>
      Array.from({ length: 240 }, (_, i) => {
        const t = i / 4;
        const p: Priority = i % 5 === 0 ? "critical" : i % 3 === 0 ? "sheddable" : "standard";
        if (refuse && t >= 20 && t < 40 && p === "sheddable") return rec(t, p, { refusedFirst: 1, retryAtS: t + 1, ttft: 120 });
        return rec(t, p, { ttft: t >= 20 && t < 40 ? slow : 100 });
      });
    const result = (seed: number, slow: number): ScenarioResult => ({
      scenario: "s",
      description: "",
      mode: "sim",
      seed,
      durationS: 60,
      offered: { requests: 240, ratePerS: 4, meanPromptTokens: 10, meanOutputTokens: 5 },
      fleet: [{ pod: "gpu-0", model: "m", speed: 1 }],
      policies: [
        policyResult({ policy: "round-robin", description: "", podNames: ["gpu-0"], durationS: 60, deadlineMs: DEADLINE_MS, step }, records(slow * 10, false)),
        policyResult({ policy: "ours:default", description: "", podNames: ["gpu-0"], durationS: 60, deadlineMs: DEADLINE_MS, step }, records(slow, true)),
        policyResult({ policy: "ours:default:no-admission", description: "", podNames: ["gpu-0"], durationS: 60, deadlineMs: DEADLINE_MS, step }, records(slow * 5, false)),
      ],
    });
    const runs = [result(1, 150), result(2, 160)];
    const t = admissionTable(runs);
    const row = (name: string) => Object.fromEntries(t.headers.map((h, i) => [h, t.rows.find((r) => r[0] === name)![i]]));
    expect(row("ours:default")).toMatchObject({
      "refused: Critical, Standard, Sheddable": "0%, 0%, 34%",
      "retried OK": "100% (22/22)",
      "Critical refused while Sheddable admitted": "0",
      "base p95 TTFT": "100 ms",
      // Timed from first arrival: the Sheddable ones waited their 1-s Retry-After, 6 of each window's 20.
      "step peak p95 (× base)": "1.12 s (11.20×)",
      "recovery (p95 ≤ 1.25× base)": "0 s",
    });
    expect(row("round-robin")["429s (first attempts)"]).toBe("0");
    const windows = stepWindowsTable(runs[0])!;
    expect(windows.rows[0]).toEqual(["base (0–20 s)", "100 ms", "100 ms", "100 ms"]);
    expect(windows.rows[1][2]).toBe("1.12 s · 6×429");
    const onOff = onOffTable(onOffRows(runs));
    expect(onOff.rows).toHaveLength(1);
    expect(onOff.rows[0].slice(0, 4)).toEqual(["s", "ours:default", "22", "0"]);
  });
});
