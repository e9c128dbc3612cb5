// A short seeded run of the fuzzer (npm run fuzz): bodies through the native
// build checked against the model server's reading, then through a real
// Envoy with two workers, which must answer exactly as the native build does.
import { describe, expect, it } from "vitest";
import { runEnvoy } from "../../fuzz/envoy.js";
import { runNative } from "../../fuzz/native.js";

const SEED = 20_240_601;

describe("fuzzer", () => {
  it("finds no disagreement in 3,000 bodies through the native build", async () => {
    const report = await runNative({ seed: SEED, count: 3000 });
    expect(report.failureCount, report.summary()).toBe(0);
    expect(report.cases).toBe(3000);
    // The run reaches every outcome, so a generator that stopped producing one shows here.
    for (const outcome of ["routed", "404 unknown model", "400 invalid UTF-8", "400 invalid JSON", "400 nesting/integer limit", "400 model", "400 stream", "400 messages", "400 prompt"]) {
      expect(report.outcomes.get(outcome) ?? 0, outcome).toBeGreaterThan(0);
    }
  });

  it("finds no disagreement in 300 bodies through Envoy, whose workers keep serving", async () => {
    const report = await runEnvoy({ seed: SEED, count: 300 });
    expect(report.failureCount, report.summary()).toBe(0);
    expect(report.cases).toBe(300);
    expect(report.outcomes.get("routed, pod answered 200") ?? 0).toBeGreaterThan(30);
    expect(report.outcomes.get("400 invalid UTF-8") ?? 0).toBeGreaterThan(10);
  }, 120_000);
});
