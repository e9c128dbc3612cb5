/**
 * Prometheus text exposition of an engine's state in the dialect of the
 * server being imitated. vLLM and SGLang expose through the Python
 * prometheus_client (floats like "3.0" and "1.7e+09", counters named
 * *_total on the HELP/TYPE lines too); TGI through the Rust exporter (plain
 * numbers, no model label); llama.cpp through a C++ stream (`%g`-like
 * doubles, no labels).
 */
import type { EngineMetrics, HistogramSnapshot } from "../engine/index.js";

/**
 * "vllm" is vLLM 0.13 and later; "vllm-legacy" is vLLM before 0.9.2 (the old
 * metric names). "sglang" is SGLang 0.5.12 and later (cache size as gauges);
 * "sglang-legacy" before (as labels of an info gauge).
 */
export type MetricsFormat = "vllm" | "vllm-legacy" | "sglang" | "sglang-legacy" | "tgi" | "llamacpp" | "trtllm";
export const METRICS_FORMATS = ["vllm", "vllm-legacy", "sglang", "sglang-legacy", "tgi", "llamacpp", "trtllm"] as const satisfies readonly MetricsFormat[];

/** The gateway's `engine` that reads each dialect. */
export const FORMAT_ENGINE = {
  vllm: "vllm",
  "vllm-legacy": "vllm",
  sglang: "sglang",
  "sglang-legacy": "sglang",
  tgi: "tgi",
  llamacpp: "llamacpp",
  trtllm: "trtllm",
} as const satisfies Record<MetricsFormat, string>;

/** The names that changed between vLLM releases (vllm/v1/metrics/loggers.py). */
const VLLM_NAMES = {
  vllm: {
    kv: "vllm:kv_cache_usage_perc",
    prefixQueries: "vllm:prefix_cache_queries_total",
    prefixHits: "vllm:prefix_cache_hits_total",
    // Named time_per_output_token_seconds until 0.11, hidden in 0.12, removed in 0.13.
    itl: "vllm:inter_token_latency_seconds",
  },
  "vllm-legacy": {
    // Renamed kv_cache_usage_perc and prefix_cache_* in 0.9 (the new names became the only ones in 0.9.2).
    kv: "vllm:gpu_cache_usage_perc",
    prefixQueries: "vllm:gpu_prefix_cache_queries_total",
    prefixHits: "vllm:gpu_prefix_cache_hits_total",
    itl: "vllm:time_per_output_token_seconds",
  },
};

type Labels = Record<string, string>;
type NumFmt = (v: number) => string;

/** prometheus_client's floatToGoString: Python float repr, large values in Go's exponent form. */
export function pyFloat(v: number): string {
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  if (Number.isNaN(v)) return "NaN";
  const s = Number.isInteger(v) && Math.abs(v) < 1e16 ? v.toFixed(1) : String(v);
  const dot = s.indexOf(".");
  if (v > 0 && dot > 6) {
    const mantissa = `${s[0]}.${s.slice(1, dot)}${s.slice(dot + 1)}`.replace(/[0.]+$/, "");
    return `${mantissa}e+0${dot - 1}`;
  }
  return s;
}

function labelText(labels: Labels): string {
  const parts = Object.entries(labels).map(
    ([k, v]) => `${k}="${v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`,
  );
  return parts.length > 0 ? `{${parts.join(",")}}` : "";
}

class Exposition {
  private lines: string[] = [];
  constructor(private readonly fmt: NumFmt) {}

  header(name: string, type: "gauge" | "counter" | "histogram", help?: string): this {
    if (help !== undefined) this.lines.push(`# HELP ${name} ${help}`);
    this.lines.push(`# TYPE ${name} ${type}`);
    return this;
  }

  sample(name: string, labels: Labels, value: number): this {
    this.lines.push(`${name}${labelText(labels)} ${this.fmt(value)}`);
    return this;
  }

  metric(name: string, type: "gauge" | "counter", help: string | undefined, labels: Labels, value: number): this {
    return this.header(name, type, help).sample(name, labels, value);
  }

  histogram(name: string, help: string | undefined, labels: Labels, h: HistogramSnapshot): this {
    this.header(name, "histogram", help);
    h.bounds.forEach((b, i) => this.sample(`${name}_bucket`, { ...labels, le: pyFloat(b) }, h.cumulative[i]));
    this.sample(`${name}_bucket`, { ...labels, le: "+Inf" }, h.count);
    this.sample(`${name}_count`, labels, h.count);
    return this.sample(`${name}_sum`, labels, h.sum);
  }

  text(): string {
    return this.lines.join("\n") + "\n";
  }
}

/**
 * The adapter lists vLLM's `lora_requests_info` carries for an engine state:
 * only adapters with unfinished requests, so an idle pod lists none, whatever
 * it holds in its GPU slots (pinned or cached; testing/engine/lora.ts).
 * In the releases "vllm" stands for (vllm/v1/metrics/stats.py
 * LoRARequestStates.update_scheduler_stats) every adapter with a request in
 * flight is a key of both the running and the waiting counts, a zero count
 * included, and vllm/v1/metrics/loggers.py joins the keys: the two labels are
 * the same list, running and queued alike. In those "vllm-legacy" stands for
 * (update_iteration_stats kept non-zero counts only) running lists the
 * adapters with running requests, waiting those with waiting ones.
 */
export function vllmAdapterLists(m: EngineMetrics, format: keyof typeof VLLM_NAMES): { running: string[]; waiting: string[] } {
  if (format === "vllm-legacy") return { running: m.runningAdapters, waiting: m.waitingAdapters };
  const active = [...m.runningAdapters, ...m.waitingAdapters.filter((a) => !m.runningAdapters.includes(a))];
  return { running: active, waiting: active };
}

/** Keeps at most this many stale lora_requests_info series (vLLM keeps them all). */
const MAX_LORA_SERIES = 64;

/** Renders one pod's /metrics; stateful only for vLLM's lingering lora_requests_info series. */
export class MetricsRenderer {
  /** Label set -> last timestamp it was current (seconds). */
  private readonly loraSeries = new Map<string, { labels: Labels; ts: number }>();
  private lastLoraTs = 0;
  /** vLLM's sleep mode (POST /sleep, /wake_up): what vllm:engine_sleep_state shows. */
  asleep = false;

  constructor(
    readonly format: MetricsFormat,
    /** Whether the server runs with LoRA enabled (vLLM only exports lora_requests_info then). */
    readonly loraEnabled: boolean,
  ) {}

  render(m: EngineMetrics, nowSeconds: number): string {
    if (this.format === "sglang" || this.format === "sglang-legacy") return sglang(m, this.format === "sglang-legacy");
    if (this.format === "tgi") return tgi(m);
    if (this.format === "llamacpp") return llamacpp(m);
    if (this.format === "trtllm") return trtllm(m);
    return this.vllm(m, nowSeconds, this.format);
  }

  private vllm(m: EngineMetrics, nowSeconds: number, format: keyof typeof VLLM_NAMES): string {
    const names = VLLM_NAMES[format];
    const l = { engine: "0", model_name: m.model };
    const out = new Exposition(pyFloat)
      .metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", l, m.numRunning)
      .metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", l, m.numWaiting)
      .metric(names.kv, "gauge", "KV-cache usage. 1 means 100 percent usage.", l, m.kvUsage);
    if (this.loraEnabled) {
      // vLLM sets the gauge on a new label set each time the adapter lists
      // change, and old label sets linger with their old timestamps: readers
      // must take the series with the largest value.
      const lists = vllmAdapterLists(m, format);
      const labels = {
        max_lora: String(m.maxLoras),
        running_lora_adapters: lists.running.join(","),
        waiting_lora_adapters: lists.waiting.join(","),
      };
      const key = labelText(labels);
      // Strictly increasing, so the current series wins even within one clock tick.
      this.lastLoraTs = Math.max(nowSeconds, this.lastLoraTs + 1e-6);
      this.loraSeries.delete(key);
      this.loraSeries.set(key, { labels, ts: this.lastLoraTs });
      for (const k of this.loraSeries.keys()) {
        if (this.loraSeries.size <= MAX_LORA_SERIES) break;
        this.loraSeries.delete(k);
      }
      out.header("vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
      for (const s of this.loraSeries.values()) out.sample("vllm:lora_requests_info", s.labels, s.ts);
    }
    const cacheInfo = {
      block_size: String(m.blockSize),
      cache_dtype: "auto",
      enable_prefix_caching: "True",
      engine: "0",
      gpu_memory_utilization: "0.9",
      num_cpu_blocks: "0",
      num_gpu_blocks: String(m.numGpuBlocks),
    };
    const c = m.counters;
    if (format === "vllm") {
      // One series per state, 1 for the current one (vllm/v1/metrics/loggers.py).
      out.header("vllm:engine_sleep_state", "gauge", "Engine sleep state; awake = 0 means engine is sleeping.");
      for (const [state, on] of [["awake", !this.asleep], ["weights_offloaded", this.asleep], ["discard_all", false]] as const) {
        out.sample("vllm:engine_sleep_state", { ...l, sleep_state: state }, on ? 1 : 0);
      }
    }
    return out
      .metric("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig", cacheInfo, 1)
      .metric("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", l, c.preemptions)
      .metric(names.prefixQueries, "counter", "Prefix cache queries, in terms of number of queried tokens.", l, c.prefixCacheQueries)
      .metric(names.prefixHits, "counter", "Prefix cache hits, in terms of number of cached tokens.", l, c.prefixCacheHits)
      .metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", l, c.promptTokens)
      .metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", l, c.generationTokens)
      .header("vllm:request_success_total", "counter", "Count of successfully processed requests.")
      .sample("vllm:request_success_total", { ...l, finished_reason: "length" }, c.finished)
      .histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", l, m.ttft)
      .histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", l, m.e2e)
      .histogram(names.itl, "Histogram of inter-token latency in seconds.", l, m.itl)
      .text();
  }
}

function sglang(m: EngineMetrics, legacy: boolean): string {
  // Each scheduler labels its series with its ranks (srt/metrics/collector.py).
  const l: Labels = legacy ? { model_name: m.model } : { model_name: m.model, tp_rank: "0", pp_rank: "0", dp_rank: "0" };
  const c = m.counters;
  const hitRate = c.prefixCacheQueries > 0 ? c.prefixCacheHits / c.prefixCacheQueries : 0;
  const out = new Exposition(pyFloat)
    .metric("sglang:num_running_reqs", "gauge", "The number of running requests.", l, m.numRunning)
    .metric("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", l, m.numWaiting)
    .metric("sglang:token_usage", "gauge", "The token usage.", l, m.kvUsage)
    .metric("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", l, hitRate);
  if (legacy) {
    out.metric("sglang:cache_config_info", "gauge", "Information of the cache config.", { ...l, page_size: String(m.blockSize), num_pages: String(m.numGpuBlocks) }, 1);
  } else {
    out
      .metric("sglang:page_size", "gauge", "The page size of the KV cache.", l, m.blockSize)
      .metric("sglang:num_pages", "gauge", "The number of pages of the KV cache.", l, m.numGpuBlocks);
  }
  return out
    .metric("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", l, c.promptTokens)
    .metric("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.", l, c.generationTokens)
    .histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", l, m.ttft)
    // SGLang adds each streamed chunk's interval to _sum and its token count to _count.
    .histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", l, m.itl)
    .text();
}

function tgi(m: EngineMetrics): string {
  const plain: NumFmt = (v) => String(v);
  return new Exposition(plain)
    .metric("tgi_queue_size", "gauge", undefined, {}, m.numWaiting)
    .metric("tgi_batch_current_size", "gauge", undefined, {}, m.numRunning)
    .metric("tgi_batch_current_max_tokens", "gauge", undefined, {}, m.batchMaxTokens)
    // The token budget the server sized its KV for (backends/v3/src/lib.rs).
    .metric("tgi_batch_max_total_tokens", "gauge", undefined, {}, m.numGpuBlocks * m.blockSize)
    .metric("tgi_request_count", "counter", undefined, {}, m.counters.submitted)
    // TGI observes each decode step's duration once; the engine's histogram
    // holds that step time once per sequence in the batch (same quantity,
    // weighted per token instead of per step).
    .histogram("tgi_batch_inference_duration", undefined, { method: "decode" }, m.itl)
    .text();
}

/** TensorRT-LLM under the names the reference picker reads; no time-per-token series. */
function trtllm(m: EngineMetrics): string {
  const l = { model_name: m.model };
  return new Exposition(pyFloat)
    .metric("trtllm_num_requests_running", "gauge", "Number of requests running.", l, m.numRunning)
    .metric("trtllm_num_requests_waiting", "gauge", "Number of requests waiting.", l, m.numWaiting)
    .metric("trtllm_kv_cache_utilization", "gauge", "KV cache utilization.", l, m.kvUsage)
    .metric("trtllm_kv_cache_tokens_per_block", "gauge", "Tokens per KV cache block.", l, m.blockSize)
    .metric("trtllm_kv_cache_max_blocks", "gauge", "KV cache blocks.", l, m.numGpuBlocks)
    .text();
}

/** A double as C++'s `ostream << double` writes it (6 significant digits, `%g`). */
export function cppDouble(v: number): string {
  if (!Number.isFinite(v)) return Number.isNaN(v) ? "nan" : v > 0 ? "inf" : "-inf";
  if (v === 0) return "0";
  const exp = Math.floor(Math.log10(Math.abs(Number(v.toPrecision(6)))));
  if (exp < -4 || exp >= 6) {
    const [mantissa, e] = v.toExponential(5).split("e");
    const digits = mantissa.includes(".") ? mantissa.replace(/\.?0+$/, "") : mantissa;
    const n = Number(e);
    return `${digits}e${n < 0 ? "-" : "+"}${String(Math.abs(n)).padStart(2, "0")}`;
  }
  const fixed = v.toFixed(Math.max(0, 5 - exp));
  return fixed.includes(".") ? fixed.replace(/\.?0+$/, "") : fixed;
}

/**
 * llama-server's --metrics page (tools/server/server-task.cpp to_metrics):
 * counters then gauges, HELP and TYPE before each, no labels. Its
 * prompt_tokens_total leaves out the tokens reused from the cache, which
 * prompt_tokens_cached_total counts; the engine model counts both in
 * prefix-cache tokens. Generation time is summed per slot, as the engine's
 * inter-token histogram is per sequence.
 */
function llamacpp(m: EngineMetrics): string {
  const c = m.counters;
  const out = new Exposition(cppDouble);
  const item = (type: "counter" | "gauge", name: string, help: string, value: number) =>
    out.metric(`llamacpp:${name}`, type, help, {}, value);
  item("counter", "prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", c.prefixCacheQueries - c.prefixCacheHits);
  item("counter", "prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", c.prefixCacheHits);
  item("counter", "tokens_predicted_total", "Number of generation tokens processed", m.itl.count);
  item("counter", "tokens_predicted_seconds_total", "Total time spent generating tokens", m.itl.sum);
  item("gauge", "requests_processing", "Number of requests processing", m.numRunning);
  item("gauge", "requests_deferred", "Number of requests deferred", m.numWaiting);
  return out.text();
}
