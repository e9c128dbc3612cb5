// The bootstrap's stats_tags turn the filter's `;tag=value` stat names into
// labels: checked on the rendered config by applying its regexes the way
// Envoy's tag extractor does (the first group is cut from the name, the
// second is the value) to every name the emulated filter defines, and on a
// real Envoy's /stats/prometheus.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { renderEnvoyConfig } from "../../host/envoy/index.js";
import { filterWasmPath } from "../../host/paths.js";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";
import { EmulatedGateway } from "../helpers/emulated-gateway.js";
import { startTestStack, waitFor, type TestStack } from "../helpers/stack.js";

interface StatsTag {
  tag_name: string;
  regex: string;
}

function renderedTags(): StatsTag[] {
  const doc = parseYaml(renderEnvoyConfig({
    gatewayHost: "127.0.0.1", gatewayPort: 0, adminPort: 0, aggregatorHost: "127.0.0.1", aggregatorPort: 50051,
    wasmPath: filterWasmPath, maxBodyBytes: 1024, pools: ["p"],
  }));
  return doc.stats_config.stats_tags;
}

/** Envoy's tag extraction (TagExtractorStdRegexImpl) on one stat name: each regex on the original name, its first group removed, its second the value. */
function extract(name: string, tags: StatsTag[]): { name: string; labels: Record<string, string> } {
  const labels: Record<string, string> = {};
  const removed = new Array<boolean>(name.length).fill(false);
  for (const t of tags) {
    const m = new RegExp(t.regex, "d").exec(name);
    if (!m || m.length < 2) continue;
    labels[t.tag_name] = m[m.length > 2 ? 2 : 1];
    const [from, to] = m.indices![1];
    for (let i = from; i < to; i++) removed[i] = true;
  }
  return { name: [...name].filter((_, i) => !removed[i]).join(""), labels };
}

/** What /stats/prometheus calls a stat in the custom namespace: the prefix stripped, other characters to "_". */
const prometheusName = (extracted: string) => extracted.replace(/^wasmcustom\./, "").replace(/[^a-zA-Z0-9_]/g, "_");

describe("stats_tags in the rendered bootstrap", () => {
  it("extract every label of every stat the filter defines, leaving plain metric names", () => {
    const tags = renderedTags();
    expect(tags.map((t) => t.tag_name).sort()).toEqual(["class", "le", "model", "model_server", "pool", "reason", "status", "target", "worker"]);
    const gw = new EmulatedGateway({ startMs: 1_700_000_000_000 });
    gw.publish({
      ...snapshot([pool("p.1", "org/m-1.5:x", [endpoint("10.0.0.1:80"), endpoint("[fd00::1]:8000")])]),
      models: [
        { name: "org/m-1.5:x", pool: 0, adapter: "", splits: [] },
        { name: "canary", pool: 0, adapter: "", splits: [{ model: 0, weight: 1 }] },
      ],
    } as never);
    gw.host.tick();
    const send = (model: string) => {
      const body = JSON.stringify({ model, messages: [] });
      gw.request({ headers: { ":method": "POST", ":path": "/v1/chat/completions", "content-length": String(body.length) }, body }).finish({ responseCode: 200 });
    };
    for (let i = 0; i < 4; i++) send("canary");
    send("nope");
    gw.host.tick();

    const names = gw.host.metrics.names().map((n) => `wasmcustom.${n}`);
    const seen = new Map(names.map((n) => [n, extract(n, tags)]));
    for (const [full, { name, labels }] of seen) {
      expect(name, full).toMatch(/^wasmcustom\.llm_gateway\.[a-z_]+$/);
      expect(Object.keys(labels).length, full).toBe((full.match(/;/g) ?? []).length);
    }
    const picks = [...seen.values()].filter((e) => e.name === "wasmcustom.llm_gateway.pod_picks_total").map((e) => e.labels);
    expect(picks).toContainEqual({ pool: "p.1", model_server: expect.stringMatching(/^(10\.0\.0\.1:80|\[fd00::1\]:8000)$/) });
    expect(extract("wasmcustom.llm_gateway.canary_served_total;model=canary;target=org/m-1.5:x", tags).labels).toEqual({ model: "canary", target: "org/m-1.5:x" });
    expect(seen.get("wasmcustom.llm_gateway.requests_refused_total;status=404;reason=model_not_found")?.labels).toEqual({ status: "404", reason: "model_not_found" });
    expect(prometheusName(extract("wasmcustom.llm_gateway.requests_routed_total;pool=p.1;model=org/m-1.5:x", tags).name)).toBe("llm_gateway_requests_routed_total");
    expect(seen.get("wasmcustom.llm_gateway.decision_duration_seconds_bucket;le=+Inf")).toEqual({ name: "wasmcustom.llm_gateway.decision_duration_seconds_bucket", labels: { le: "+Inf" } });
    expect(seen.get("wasmcustom.llm_gateway.decision_duration_seconds_bucket;le=0.000075")?.labels).toEqual({ le: "0.000075" });
    const ttft = extract("wasmcustom.llm_gateway.time_to_first_token_seconds_bucket;pool=p.1;model=org/m-1.5:x;le=2.5", tags);
    expect(ttft).toEqual({ name: "wasmcustom.llm_gateway.time_to_first_token_seconds_bucket", labels: { pool: "p.1", model: "org/m-1.5:x", le: "2.5" } });
    // Counters end in _total, their histograms' series aside.
    for (const [full, { name }] of seen) {
      if (!/_(bucket|count)$/.test(name) && gw.host.metrics.get(full.replace(/^wasmcustom\./, ""))?.kind === "counter") expect(name).toMatch(/_total$/);
    }
    expect([...seen.values()].filter((e) => e.name.endsWith("_total")).length).toBeGreaterThan(5);
    // Envoy's own stats are left alone.
    expect(extract("cluster.llm_gateway_pool_p.upstream_rq_200", tags).labels).toEqual({});
  });
});

describe("labels on a real Envoy's /stats/prometheus", () => {
  let stack: TestStack;

  beforeAll(async () => {
    stack = await startTestStack([{ name: "llama", baseModel: "org/llama-3.1:8b", pods: [{ name: "a" }] }]);
  }, 60_000);
  afterAll(() => stack?.close());

  it("shows the filter's counters, gauges and histograms with their labels", async () => {
    const ask = (stream: boolean) => fetch(`${stack.gatewayUrl}/v1/chat/completions`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "org/llama-3.1:8b", messages: [{ role: "user", content: "hi" }], max_tokens: 2, stream }),
    });
    const res = await ask(false);
    expect(res.status).toBe(200);
    const usage = (await res.json()).usage;
    const streamed = await ask(true);
    expect(streamed.status).toBe(200);
    expect(await streamed.text()).toContain("data: [DONE]");
    const pod = stack.fleet.pod("a").address;
    let text = "";
    // Counters reach Envoy on the filter's next tick.
    await waitFor("the filter's stats", async () => {
      text = await (await fetch(`${stack.envoy.adminUrl}/stats/prometheus`)).text();
      return text.includes('llm_gateway_requests_routed_total{pool="llama",model="org/llama-3.1:8b"} 2') && text.includes(`llm_gateway_tokens_in_total{pool="llama",model="org/llama-3.1:8b"} ${usage.prompt_tokens}`) &&
        text.includes('llm_gateway_time_to_first_token_seconds_count{pool="llama",model="org/llama-3.1:8b"} 1');
    }, 15_000);
    expect(text).toContain('llm_gateway_requests_routed_total{pool="llama",model="org/llama-3.1:8b"} 2');
    expect(text).toContain(`llm_gateway_pod_picks_total{pool="llama",model_server="${pod}"} 2`);
    expect(text).toContain(`llm_gateway_tokens_out_total{pool="llama",model="org/llama-3.1:8b"} ${usage.completion_tokens}`);
    expect(text).toContain('llm_gateway_pool_pods{pool="llama"} 1');
    // One decision in 16 per worker is timed, from its first: the two requests met one worker or both, and
    // each timed its first. Timed decisions count in cumulative buckets with bounds in seconds.
    const timed = Number(/^llm_gateway_decision_duration_seconds_count(?:\{\})? (\d+)$/m.exec(text)?.[1]);
    expect([1, 2]).toContain(timed);
    expect(text).toMatch(new RegExp(`^llm_gateway_decision_duration_seconds_bucket\\{le="\\+Inf"\\} ${timed}$`, "m"));
    expect(text).toMatch(new RegExp(`^llm_gateway_decision_duration_seconds_bucket\\{le="0.05"\\} ${timed}$`, "m"));
    expect(text).toMatch(/^llm_gateway_time_to_first_token_seconds_bucket\{pool="llama",model="org\/llama-3.1:8b",le="60"\} 1$/m);
    expect(text).toMatch(/^llm_gateway_class_admitted_total\{class="standard"\} 2$/m);
    expect(text).not.toMatch(/^llm_gateway_\w*\{[^}]*\bpod=/m);
    // No name keeps a label's value.
    expect(text).not.toMatch(/^llm_gateway_\w*(llama|127_0_0_1|standard)/m);
  });
});
