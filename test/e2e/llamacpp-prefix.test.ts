// The prefix check on real model servers, measured by their own counters:
// one trace of requests sharing a few long system prompts, replayed through
// round-robin, least-request and ours by the live bench (bench/live/) onto
// fresh llama.cpp pods each time. Whatever the timings, ours must have the
// servers reuse more of their prompt cache than either Envoy balancer.
import { describe, expect, it } from "vitest";
import { runLive } from "../../bench/live/index.js";
import { loadScenario } from "../../bench/scenario.js";
import { projectRoot } from "../../host/paths.js";
import { skipWithoutLlamacpp } from "../helpers/llamacpp.js";
import { join } from "node:path";

const SUITE = "prefix reuse on real llama.cpp pods";

describe.skipIf(skipWithoutLlamacpp(SUITE))(SUITE, () => {
  it("ours reuses more of the servers' prompt cache than round-robin and least-request", async () => {
    const scenario = loadScenario(join(projectRoot, "bench", "scenarios", "real-engine", "llamacpp-prefix.yaml"));
    const result = await runLive(scenario, { fleet: "llamacpp", durationS: 20 });
    const by = Object.fromEntries(result.policies.map((p) => [p.policy, p]));
    const reuse = (name: string) => by[name].serverCacheReuse ?? -1;
    for (const p of result.policies) {
      expect(p.errors, `${p.policy}: ${JSON.stringify(p.errorsByReason)}`).toBe(0);
      expect(p.serverCacheReuse, p.policy).not.toBeNull();
    }
    expect(reuse("ours:default")).toBeGreaterThan(reuse("round-robin"));
    expect(reuse("ours:default")).toBeGreaterThan(reuse("least-request"));
  }, 400_000);
});
