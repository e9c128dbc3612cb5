// Engines: every fake dialect's /metrics, read by the aggregator's parser and
// normaliser, gives back the engine's state; and the real servers' naming
// quirks (renamed metrics, labelled series, data-parallel engines).
import { describe, expect, it } from "vitest";
import { normalise, wantedMetrics } from "../../host/aggregator/normalise.js";
import { parsePrometheusText } from "../../host/aggregator/scrape.js";

import { Engine } from "../../testing/engine/index.js";
import { FORMAT_ENGINE, METRICS_FORMATS, MetricsRenderer, type MetricsFormat } from "../../testing/fakeserver/metrics.js";

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
  const want = wantedMetrics(FORMAT_ENGINE[format]);
  return normalise(FORMAT_ENGINE[format], parsePrometheusText(text, (n) => want.has(n)));
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
    expect(got).toMatchObject({ waiting: m.numWaiting, running: m.numRunning });
    if (format === "trtllm") {
      // No time-per-token series under the names the reference picker reads.
      expect(got.itl).toBeNull();
    } else {
      expect(got.itl?.count).toBe(m.itl.count);
      // llama.cpp prints doubles as C's %g does: six significant digits.
      expect(got.itl?.sumS).toBeCloseTo(m.itl.sum, format === "llamacpp" ? 4 : 12);
    }
    // TGI and llama.cpp export no KV gauge; vLLM alone names its adapters.
    const noKv = format === "tgi" || format === "llamacpp";
    const noKvSize = format === "llamacpp";
    expect(got.kvCacheUsage).toBeCloseTo(noKv ? 0 : m.kvUsage, 12);
    const vllm = FORMAT_ENGINE[format] === "vllm";
    expect(got.maxLora).toBe(vllm ? 1 : 0);
    // vLLM since 0.13 names every adapter in flight in both lists; before, running and waiting apart.
    const active = ["chat-lora", "sql-lora"];
    expect(got.runningAdapters).toEqual(format === "vllm" ? active : format === "vllm-legacy" ? ["sql-lora"] : []);
    expect(got.waitingAdapters).toEqual(format === "vllm" ? active : format === "vllm-legacy" ? ["chat-lora"] : []);
    // KV capacity from each engine's own size metrics (llama.cpp has none).
    expect(got.kvTokens).toBe(noKvSize ? 0 : m.numGpuBlocks * m.blockSize);
    expect(got.asleep).toBe(false);
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

  it("vLLM: the newest lora_requests_info series wins; a tie (llm-d's inference-sim stamps whole seconds) goes to more running adapters, then the first lists, in any page order", () => {
    const info = (running: string, waiting: string, value: number, maxLora = "4") =>
      `vllm:lora_requests_info{max_lora="${maxLora}",running_lora_adapters="${running}",waiting_lora_adapters="${waiting}"} ${value}\n`;
    const pick = (...series: string[]) => {
      const seen = new Set<string>();
      // Every order of the series must give the same answer.
      const orders = series.length === 2 ? [series, [...series].reverse()] : [series, [...series].reverse(), [series[1], series[0], ...series.slice(2)]];
      for (const order of orders) {
        const m = read("vllm", vllmGauges + order.join(""));
        seen.add(JSON.stringify([m.maxLora, m.runningAdapters, m.waitingAdapters]));
      }
      expect(seen.size).toBe(1);
      return JSON.parse([...seen][0]) as [number, string[], string[]];
    };
    expect(pick(info("a", "", 1700000001), info("a,b", "", 1700000000))).toEqual([4, ["a"], []]);
    expect(pick(info("a", "", 1700000000), info("b,a", "c", 1700000000), info("", "", 1700000000))).toEqual([4, ["a", "b"], ["c"]]);
    expect(pick(info("b", "", 1700000000), info("a", "z", 1700000000))).toEqual([4, ["a"], ["z"]]);
    expect(pick(info("a", "", 1700000000, "8"), info("a", "", 1700000000, "4"))).toEqual([4, ["a"], []]);
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
      waiting: 1, running: 2, kvCacheUsage: 0.25, maxLora: 0, runningAdapters: [], waitingAdapters: [], itl: { sumS: 0.6, count: 40 }, kvTokens: 0, asleep: false,
    });
  });

  it("vLLM asleep (sleep mode): the fake's sleep routes show in engine_sleep_state, and the pod reads as asleep", () => {
    const m = busyEngine().metrics();
    const r = new MetricsRenderer("vllm", false);
    expect(read("vllm", r.render(m, 2)).asleep).toBe(false);
    r.asleep = true;
    const text = r.render(m, 3);
    expect(text).toMatch(/vllm:engine_sleep_state\{[^}]*sleep_state="awake"\} 0\.0/);
    expect(read("vllm", text).asleep).toBe(true);
  });

  it("SGLang >= 0.5.12: cache size from page_size x num_pages; ranks of one DP rank count once, DP ranks add up", () => {
    const series = (name: string, dp: string, tp: string, v: number) => `sglang:${name}{model_name="m",dp_rank="${dp}",tp_rank="${tp}",pp_rank="0"} ${v}\n`;
    const text = ["0", "1"].flatMap((dp) => ["0", "1"].map((tp) =>
      series("num_queue_reqs", dp, tp, dp === "0" ? 3 : 1) + series("num_running_reqs", dp, tp, 4) + series("token_usage", dp, tp, 0.5) +
      series("page_size", dp, tp, 16) + series("num_pages", dp, tp, dp === "0" ? 1000 : 900),
    )).join("");
    // Waiting 3 + 1 and running 4 + 4, not doubled by the TP ranks; the smaller DP rank's cache (a request lands in one).
    expect(read("sglang", text)).toMatchObject({ waiting: 4, running: 8, kvTokens: 900 * 16 });
  });

  it("SGLang before 0.5.12: cache size from the info gauge's labels", () => {
    const text = 'sglang:num_queue_reqs{model_name="m"} 0\nsglang:num_running_reqs{model_name="m"} 0\nsglang:cache_config_info{model_name="m",page_size="1",num_pages="5000"} 1\n';
    expect(read("sglang", text).kvTokens).toBe(5000);
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
