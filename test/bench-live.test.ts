// The live benchmark harness (real Envoys, real fake fleet, real time) on a
// tiny scenario: correctness of the harness, not timing.
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { replay } from "../bench/live/client.js";
import { runLive } from "../bench/live/index.js";
import { parseScenario } from "../bench/scenario.js";
import { generateTrace } from "../bench/sim/workload.js";
import { TIMEOUT } from "../bench/types.js";

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

  it("censors requests still open at the drain deadline, as the simulator does", async () => {
    // Even requests get a first token and then stall; odd ones get nothing at all.
    const open: ServerResponse[] = [];
    const server = createServer((req, res) => {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        open.push(res);
        if (Number(/#(\d+) /.exec(body)![1]) % 2 === 0) res.writeHead(200, { "content-type": "text/event-stream" }).write('data: {"choices":[]}\n\n');
      });
    });
    await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
    try {
      const trace = generateTrace({ ...scenario, durationS: 0.5 }, 1);
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const drainLimitMs = 400;
      const records = await replay(trace, { url, poolNames: ["llama-3.1-8b", "qwen3-32b"], podIndex: new Map() }, { drainLimitMs });
      const deadline = trace.requests.at(-1)!.arrivalMs + drainLimitMs;
      expect(records.length).toBeGreaterThan(2);
      records.forEach((r, i) => {
        expect(r.error).toBe(TIMEOUT);
        // Censored at the deadline, give or take the timers' slack.
        expect(r.e2eMs!).toBeGreaterThan(deadline - r.arrivalMs - 100);
        expect(r.e2eMs!).toBeLessThan(deadline - r.arrivalMs + 200);
        if (i % 2 === 0) expect(r.ttftMs!).toBeLessThan(r.e2eMs! - 150);
        else expect(r.ttftMs).toBe(r.e2eMs);
      });
    } finally {
      for (const res of open) res.destroy();
      server.close();
    }
  });
});
