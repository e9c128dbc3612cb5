// The soak, very short: one cycle of 20 s on the real stack (pods and the
// aggregator as processes, Envoy with the filter) with one kill, its
// restore, one join and one leave. Asserts how requests were classified and
// what the faults did to them, never how fast anything was. The
// classification rules themselves are checked on made-up records first.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { classify, INJECTED_WINDOW_MS, type Kill } from "../../testing/soak/classify.js";
import type { SoakRecord } from "../../testing/soak/load.js";
import { runSoak, verdict, type SoakResult } from "../../testing/soak/index.js";
import { trendOf } from "../../testing/soak/trend.js";

const record = (over: Partial<SoakRecord>): SoakRecord => ({
  index: 0, atMs: 1_000, kind: "chat", model: "llama-3.1-8b", stream: true, priority: null, maxTokens: 16, prefix: 0,
  sentMs: 1_000, servedBy: null, promptTokens: 0, cachedTokens: 0, outputTokens: 0, ...over,
});
const cut = (pod: string, sentMs: number, endMs: number) =>
  record({ servedBy: pod, sentMs, headersMs: sentMs + 100, endMs, error: { kind: "broken", message: "terminated" } });

describe("soak classification", () => {
  const kills: Kill[] = [{ pod: "llama-0", atMs: 5_000 }];

  it("blames a kill only for a stream its pod was sending when it died, cut within the window", () => {
    expect(classify(cut("llama-0", 4_000, 6_000), kills).outcome).toBe("injected");
    expect(classify(cut("llama-0", 4_000, 5_000 + INJECTED_WINDOW_MS), kills).outcome).toBe("injected");
    // Cut later than the window, by another pod, before the kill, or sent after it: not the kill's doing.
    expect(classify(cut("llama-0", 4_000, 5_001 + INJECTED_WINDOW_MS), kills).outcome).toBe("unexpected");
    expect(classify(cut("llama-1", 4_000, 6_000), kills).outcome).toBe("unexpected");
    expect(classify(cut("llama-0", 4_000, 4_900), kills).outcome).toBe("unexpected");
    expect(classify(cut("llama-0", 5_100, 6_000), kills).outcome).toBe("unexpected");
  });

  it("never blames a kill for a request that failed without a 200 from the dead pod", () => {
    const noAnswer = record({ sentMs: 4_900, endMs: 5_200, error: { kind: "status", status: 503, code: "upstream_unavailable", message: "503" } });
    expect(classify(noAnswer, kills)).toEqual({ outcome: "unexpected", kind: "503 upstream_unavailable" });
  });

  it("takes a bad request's error as expected only when it is the documented one", () => {
    const notFound = { kind: "status" as const, status: 404, code: "model_not_found", message: "404" };
    expect(classify(record({ kind: "unknown-model", error: notFound }), []).outcome).toBe("expected");
    expect(classify(record({ kind: "malformed-json", error: notFound }), []).outcome).toBe("unexpected");
    expect(classify(record({ kind: "malformed-json", error: { kind: "status", status: 400, message: "400" } }), []).outcome).toBe("expected");
    expect(classify(record({ kind: "bad-priority", error: { kind: "status", status: 400, param: "x-llm-priority", message: "400" } }), []).outcome).toBe("expected");
    expect(classify(record({ kind: "bad-priority", error: { kind: "status", status: 400, param: "model", message: "400" } }), []).outcome).toBe("unexpected");
    expect(classify(record({ kind: "unknown-model" }), []).outcome).toBe("unexpected");
  });

  it("counts a 429 as an admission refusal only with pool_saturated and Retry-After", () => {
    const refusal = { kind: "status" as const, status: 429, code: "pool_saturated", retryAfterS: 1, message: "429" };
    expect(classify(record({ error: refusal }), []).outcome).toBe("refused");
    expect(classify(record({ error: { ...refusal, retryAfterS: null } }), []).outcome).toBe("unexpected");
    expect(classify(record({ error: { ...refusal, code: "rate_limit_exceeded" } }), []).outcome).toBe("unexpected");
  });
});

describe("memory levelling", () => {
  const MiB = 2 ** 20;
  const series = (mbAt: (min: number) => number) =>
    Array.from({ length: 121 }, (_, i) => ({ tMs: i * 5_000, envoyRssBytes: mbAt(i / 12) * MiB, aggregatorRssBytes: null, wasmBytes: null, vmReloads: null }));

  it("passes a series that climbs at the start and then stays flat, fails one that keeps growing", () => {
    expect(trendOf(series((m) => 40 + Math.min(m, 2) * 10), "envoyRssBytes", 600_000).levelsOff).toBe(true);
    expect(trendOf(series((m) => 40 + m), "envoyRssBytes", 600_000).levelsOff).toBe(false);
    expect(trendOf(series(() => 40), "aggregatorRssBytes", 600_000).levelsOff).toBeNull();
  });

  it("passes a garbage collector's sawtooth whose peaks repeat, even caught climbing at the end; fails one whose peaks rise", () => {
    // As the aggregator did: climbs 80 -> 110 MiB, drops at major collections (2 and 4 min), then one slow climb to the end.
    const gc = (m: number) => (m < 4 ? 80 + 15 * (m % 2) : 80 + 5 * (m - 4));
    const bounded = trendOf(series(gc), "envoyRssBytes", 600_000);
    expect(bounded.secondHalfSlopeBytesPerMin).toBeGreaterThan(0);
    expect(bounded.levelsOff).toBe(true);
    expect(trendOf(series((m) => gc(m) + m), "envoyRssBytes", 600_000).levelsOff).toBe(false);
  });
});

describe("a 20-second soak on the real stack", () => {
  let dir: string;
  let result: SoakResult;
  const unexpected = () => JSON.stringify(result.notOk.filter((r) => r.outcome === "unexpected").slice(0, 5), null, 1);

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "soak-"));
    result = await runSoak({
      durationMs: 20_000,
      outDir: dir,
      sampleEveryMs: 1_000,
      cycle: {
        lengthMs: 20_000,
        steps: [
          { atMs: 2_000, kind: "kill" },
          { atMs: 5_000, kind: "restore" },
          { atMs: 8_000, kind: "join" },
          { atMs: 11_000, kind: "leave" },
        ],
      },
    });
  }, 150_000);

  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it("carries out every event and sees no unexpected outcome", () => {
    expect(result.events.map((e) => e.kind)).toEqual(["kill", "restore", "join", "leave"]);
    expect(result.failures).toEqual([]);
    expect(result.byOutcome.unexpected, unexpected()).toBe(0);
    expect(verdict(result)).toEqual([]);
    expect(result.byOutcome.ok).toBeGreaterThan(0);
    expect(result.byOutcome.expected).toBeGreaterThan(0);
  });

  it("classifies the streams the killed pod was sending as injected, and nothing else", () => {
    const [kill] = result.kills;
    const cutByKill = result.notOk.filter((r) => r.servedBy === kill.pod && r.error?.kind === "broken");
    expect(result.events[0].streamsUnderway).toBeGreaterThan(0);
    expect(cutByKill.length).toBeGreaterThan(0);
    expect(cutByKill.every((r) => r.outcome === "injected")).toBe(true);
    expect(result.byOutcome.injected).toBe(cutByKill.length);
  });

  it("serves requests on the killed pod again after it came back on its address", () => {
    expect(result.recoveries).toHaveLength(1);
    expect(result.recoveries[0].pod).toBe(result.kills[0].pod);
    expect(result.recoveries[0].servedAgainAfterMs).not.toBeNull();
  });

  it("routes to the pod that joined, and the pod that left served all it was given", () => {
    const join = result.events.find((e) => e.kind === "join")!;
    const leave = result.events.find((e) => e.kind === "leave")!;
    expect(join.pod).not.toBe(leave.pod);
    expect(result.byPod[join.pod]?.ok).toBeGreaterThan(0);
    // It was drained, not cut: whatever it answered arrived whole.
    expect(leave.pod).not.toBe(result.kills[0].pod);
    expect(result.byPod[leave.pod]?.ok).toBeGreaterThan(0);
    expect(Object.keys(result.byPod[leave.pod]!)).toEqual(["ok"]);
  });

  it("samples Envoy's and the aggregator's RSS and the filter's Wasm memory", () => {
    const last = result.samples.at(-1)!;
    expect(last.envoyRssBytes).toBeGreaterThan(0);
    expect(last.aggregatorRssBytes).toBeGreaterThan(0);
    expect(last.wasmBytes).toBeGreaterThanOrEqual(65536);
    expect(result.trends.map((t) => t.peakBytes !== null)).toEqual([true, true, true]);
  });
});
