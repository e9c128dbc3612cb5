// Engines: every fake dialect's /metrics, read by the aggregator's parser and
// normaliser, gives back the engine's state; and the real servers' naming
// quirks (renamed metrics, labelled series, data-parallel engines).
import { describe, expect, it } from "vitest";
import { normalise, wantedMetrics } from "../../host/aggregator/normalise.js";
import { parsePrometheusText } from "../../host/aggregator/scrape.js";
import type { Engine as EngineName } from "../../host/config.js";
import { Engine } from "../../testing/engine/index.js";
import { METRICS_FORMATS, MetricsRenderer, type MetricsFormat } from "../../testing/fakeserver/metrics.js";

const ENGINE_OF: Record<MetricsFormat, EngineName> = { vllm: "vllm", "vllm-legacy": "vllm", sglang: "sglang", tgi: "tgi" };

/** An engine mid-run: requests decoding, more queued behind them, two adapters in play. */
function busyEngine(): Engine {
  const engine = new Engine({ model: "m", maxLoras: 1, maxNumSeqs: 6 }, 0);
  engine.submit({ id: "l1", prompt: "sql".padEnd(200, "x"), maxTokens: 500, adapter: "sql-lora" }, 0);
  engine.submit({ id: "l2", prompt: "chat".padEnd(200, "x"), maxTokens: 500, adapter: "chat-lora" }, 0);
  for (let i = 0; i < 8; i++) engine.submit({ id: `b${i}`, prompt: `b${i} `.padEnd(400, "x"), maxTokens: 500 }, 0);
  engine.advanceTo(2000);
  return engine;
}

const read = (format: MetricsFormat, text: string) => {
  const want = wantedMetrics(ENGINE_OF[format]);
  return normalise(ENGINE_OF[format], parsePrometheusText(text, (n) => want.has(n)));
};

describe("each fake dialect, read back by the aggregator", () => {
  const engine = busyEngine();
  const m = engine.metrics();

  it("the engine is mid-run: running, waiting, KV in use, token gaps timed", () => {
    expect(m.numRunning).toBeGreaterThan(0);
    expect(m.numWaiting).toBeGreaterThan(0);
    expect(m.kvUsage).toBeGreaterThan(0);
    expect(m.itl.count).toBeGreaterThan(100);
    expect([m.runningAdapters, m.waitingAdapters]).toEqual([["sql-lora"], ["chat-lora"]]);
  });

  it.each(METRICS_FORMATS)("%s", (format) => {
    const text = new MetricsRenderer(format, true).render(m, 2);
    const got = read(format, text);
    expect(got).toMatchObject({ waiting: m.numWaiting, running: m.numRunning, itl: { sumS: m.itl.sum, count: m.itl.count } });
    // TGI exports no KV gauge; vLLM alone names its adapters.
    expect(got.kvCacheUsage).toBeCloseTo(format === "tgi" ? 0 : m.kvUsage, 12);
    const vllm = ENGINE_OF[format] === "vllm";
    expect(got.maxLora).toBe(vllm ? 1 : 0);
    expect(got.runningAdapters).toEqual(vllm ? [...m.runningAdapters].sort() : []);
    expect(got.waitingAdapters).toEqual(vllm ? [...m.waitingAdapters].sort() : []);
    // KV capacity from the cache config info gauge (TGI has none).
    expect(got.kvTokens).toBe(format === "tgi" ? 0 : m.numGpuBlocks * m.blockSize);
  });

  it("vllm-legacy speaks pre-0.9.2 vLLM: only the old names, which the aggregator falls back to", () => {
    const names = (format: MetricsFormat) => new Set(parsePrometheusText(new MetricsRenderer(format, false).render(m, 2)).map((s) => s.name));
    const legacy = names("vllm-legacy");
    const current = names("vllm");
    for (const [old, now] of [
      ["vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"],
      ["vllm:time_per_output_token_seconds_count", "vllm:inter_token_latency_seconds_count"],
      ["vllm:gpu_prefix_cache_queries_total", "vllm:prefix_cache_queries_total"],
    ]) {
      expect([legacy.has(old), legacy.has(now)], old).toEqual([true, false]);
      expect([current.has(old), current.has(now)], now).toEqual([false, true]);
    }
  });
});

describe("normalise: real servers' names", () => {
  const vllmGauges = 'vllm:num_requests_waiting{engine="0"} 0\nvllm:num_requests_running{engine="0"} 0\n';

  it("vLLM 0.11-0.12 exports both ITL names: the new one wins", () => {
    const text =
      vllmGauges +
      'vllm:inter_token_latency_seconds_sum{engine="0"} 1.5\nvllm:inter_token_latency_seconds_count{engine="0"} 100\n' +
      'vllm:time_per_output_token_seconds_sum{engine="0"} 9\nvllm:time_per_output_token_seconds_count{engine="0"} 9\n';
    expect(read("vllm", text).itl).toEqual({ sumS: 1.5, count: 100 });
  });

  it("vLLM: a data-parallel pod's ITL is summed over its engines", () => {
    const text =
      vllmGauges +
      'vllm:inter_token_latency_seconds_sum{engine="0"} 1\nvllm:inter_token_latency_seconds_count{engine="0"} 100\n' +
      'vllm:inter_token_latency_seconds_sum{engine="1"} 3\nvllm:inter_token_latency_seconds_count{engine="1"} 100\n';
    expect(read("vllm", text).itl).toEqual({ sumS: 4, count: 200 });
  });

  it("TGI: only decode steps time the tokens; prefill steps do not", () => {
    const text =
      "tgi_queue_size 0\ntgi_batch_current_size 3\n" +
      'tgi_batch_inference_duration_bucket{method="prefill",le="+Inf"} 7\ntgi_batch_inference_duration_sum{method="prefill"} 3.5\n' +
      'tgi_batch_inference_duration_count{method="prefill"} 7\n' +
      'tgi_batch_inference_duration_sum{method="decode"} 1.2\ntgi_batch_inference_duration_count{method="decode"} 100\n' +
      "tgi_request_mean_time_per_token_duration_sum 0.9\ntgi_request_mean_time_per_token_duration_count 20\n";
    expect(read("tgi", text).itl).toEqual({ sumS: 1.2, count: 100 });
  });

  it("SGLang exposes no adapter names: maxLora stays 0 (unknown) even with LoRA slot counts", () => {
    const text =
      'sglang:num_queue_reqs{model_name="m"} 1\nsglang:num_running_reqs{model_name="m"} 2\nsglang:token_usage{model_name="m"} 0.25\n' +
      'sglang:lora_pool_slots_total{model_name="m"} 8\nsglang:lora_pool_slots_used{model_name="m"} 3\n' +
      'sglang:inter_token_latency_seconds_sum{model_name="m"} 0.6\nsglang:inter_token_latency_seconds_count{model_name="m"} 40\n';
    expect(read("sglang", text)).toEqual({
      waiting: 1, running: 2, kvCacheUsage: 0.25, maxLora: 0, runningAdapters: [], waitingAdapters: [], itl: { sumS: 0.6, count: 40 }, kvTokens: 0,
    });
  });

  it.each([
    ["no histogram", ""],
    ["a count without a sum", "vllm:inter_token_latency_seconds_count 10\n"],
    ["a NaN sum", "vllm:inter_token_latency_seconds_sum NaN\nvllm:inter_token_latency_seconds_count 10\n"],
    ["a negative count", "vllm:inter_token_latency_seconds_sum 1\nvllm:inter_token_latency_seconds_count -1\n"],
  ])("reads %s as no ITL, and the scrape still counts", (_name, extra) => {
    expect(read("vllm", vllmGauges + extra)).toMatchObject({ waiting: 0, running: 0, itl: null });
  });
});
