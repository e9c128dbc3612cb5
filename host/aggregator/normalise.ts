// Maps engine-specific Prometheus metrics to the engine-neutral numbers the
// Endpoint Picker scores on. What an engine does not export keeps its
// "unknown" value: kvCacheUsage 0, maxLora 0 with empty adapter lists, itl
// null (then the snapshot's capacity is 0), kvTokens 0. docs/scorers.md "Signals per engine"
// lists the mapping.
import type { Engine } from "../config.js";
import type { Sample } from "./scrape.js";

/** Cumulative totals of an inter-token latency histogram, as scraped. */
export interface ItlTotals {
  /** Seconds between consecutive output tokens, summed. */
  sumS: number;
  /** Token gaps observed. */
  count: number;
}

export interface EndpointMetrics {
  /** Requests queued, not yet running. */
  waiting: number;
  /** Requests in the running batch. */
  running: number;
  /** KV-cache utilisation, 0..1; 0 when the engine does not export it (TGI). */
  kvCacheUsage: number;
  /** LoRA adapter slots (vLLM `max_lora`); 0 when unknown or not a LoRA server. */
  maxLora: number;
  /** Sorted, de-duplicated adapter names. */
  runningAdapters: string[];
  waitingAdapters: string[];
  /** What the capacity learner reads (capacity.ts); null when the engine exports no such histogram. */
  itl: ItlTotals | null;
  /** KV-cache capacity in tokens, from the engine's cache config info; 0 when not exported (TGI). */
  kvTokens: number;
}

/** A histogram's name, and the labels a series must carry to count. */
interface HistogramName {
  name: string;
  labels?: Readonly<Record<string, string>>;
}

interface EngineMetricNames {
  waiting: string;
  running: string;
  /** In order of preference; the first present wins. */
  kv: string[];
  lora?: string;
  /** The cache config info gauge and its labels for block count and block size (tokens). */
  cacheInfo?: { name: string; blocks: string; blockSize: string };
  /** Histograms of the time between output tokens, newest name first; the first present wins. */
  itl: HistogramName[];
}

const NAMES: Record<Engine, EngineMetricNames> = {
  vllm: {
    waiting: "vllm:num_requests_waiting",
    running: "vllm:num_requests_running",
    // kv_cache_usage_perc since vLLM 0.9.2 (V1); gpu_cache_usage_perc before.
    kv: ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    lora: "vllm:lora_requests_info",
    cacheInfo: { name: "vllm:cache_config_info", blocks: "num_gpu_blocks", blockSize: "block_size" },
    // One observation per output event of a request, its time since the
    // previous one (vllm/v1/metrics/loggers.py). Renamed in 0.11 (PR 24110);
    // the old name was hidden in 0.12 and removed in 0.13 (PR 32661).
    itl: [{ name: "vllm:inter_token_latency_seconds" }, { name: "vllm:time_per_output_token_seconds" }],
  },
  // SGLang has no adapter residency metric: with LoRA on, recent releases
  // export sglang:lora_pool_slots_used / _total, counts without names, which
  // would tell the LoRA scorer nothing per adapter; maxLora stays 0 (unknown).
  sglang: {
    waiting: "sglang:num_queue_reqs",
    running: "sglang:num_running_reqs",
    kv: ["sglang:token_usage"],
    cacheInfo: { name: "sglang:cache_config_info", blocks: "num_pages", blockSize: "page_size" },
    // Each streamed chunk adds its interval to _sum and its token count to
    // the buckets (srt/metrics/collector.py observe_inter_token_latency).
    itl: [{ name: "sglang:inter_token_latency_seconds" }],
  },
  // TGI exports no KV-cache gauge at all; kvCacheUsage is reported as 0, so
  // the KV scorer treats every TGI pod alike and queue/running decide. Its
  // adapters are loaded at start (LORA_ADAPTERS), so every pod holds them all
  // and there is no residency metric either.
  tgi: {
    waiting: "tgi_queue_size",
    running: "tgi_batch_current_size",
    kv: [],
    // The wall time of each decode step, one token for every running request
    // (backends/v3 backend.rs). Not tgi_request_mean_time_per_token_duration:
    // one observation per finished request, prefill included, so it lags by a
    // whole request.
    itl: [{ name: "tgi_batch_inference_duration", labels: { method: "decode" } }],
  },
};

const wantedSet = (n: EngineMetricNames): ReadonlySet<string> =>
  new Set([
    n.waiting, n.running, ...n.kv, ...(n.lora ? [n.lora] : []), ...(n.cacheInfo ? [n.cacheInfo.name] : []),
    ...n.itl.flatMap((h) => [`${h.name}_sum`, `${h.name}_count`]),
  ]);
const WANTED: Record<Engine, ReadonlySet<string>> = { vllm: wantedSet(NAMES.vllm), sglang: wantedSet(NAMES.sglang), tgi: wantedSet(NAMES.tgi) };

/** The metric names `normalise` reads for an engine (a filter for the parser). */
export function wantedMetrics(engine: Engine): ReadonlySet<string> {
  return WANTED[engine];
}

const UINT32_MAX = 0xffffffff;

const formatValue = (v: number) => (Number.isNaN(v) ? "NaN" : v === Infinity ? "+Inf" : v === -Infinity ? "-Inf" : String(v));

/**
 * The gauge values of every series of `name`; null when the metric is absent
 * (not this engine, or not up yet). A NaN, infinite or negative value means
 * the server's state is unknown, not 0: it throws, so the scrape counts as
 * failed and the pod goes stale. The message names the metric and value and
 * stays the same while they do (the aggregator logs each new message once).
 */
function gaugeValues(samples: Sample[], name: string): number[] | null {
  const values = samples.filter((s) => s.name === name).map((s) => s.value);
  if (values.length === 0) return null;
  const bad = values.find((v) => !Number.isFinite(v) || v < 0);
  if (bad !== undefined) throw new Error(`malformed ${name}: ${formatValue(bad)} (expected a finite number >= 0)`);
  return values;
}

/**
 * Counts are summed over all series of the metric: a data-parallel vLLM
 * reports one series per `engine` label, and the pod's queue is all of them.
 */
function sumCount(samples: Sample[], name: string): number | null {
  const values = gaugeValues(samples, name);
  return values === null ? null : Math.min(Math.round(values.reduce((a, b) => a + b, 0)), UINT32_MAX);
}

/**
 * KV usage is the maximum over series: each engine has its own cache, and the
 * fullest one is the one that will refuse (or preempt) the next request.
 */
function maxFraction(samples: Sample[], name: string): number | null {
  const values = gaugeValues(samples, name);
  return values === null ? null : Math.min(Math.max(...values), 1);
}

function adapterList(csv: string | undefined): string[] {
  if (!csv) return [];
  // Sorted so a reordering by the server is not mistaken for a change.
  return [...new Set(csv.split(",").map((a) => a.trim()).filter((a) => a !== ""))].sort();
}

/**
 * vLLM keeps one `lora_requests_info` series per label combination ever seen,
 * its value the time it was last set: the series with the largest value is
 * the current state.
 */
function loraInfo(samples: Sample[], name: string): Pick<EndpointMetrics, "maxLora" | "runningAdapters" | "waitingAdapters"> {
  let latest: Sample | undefined;
  for (const s of samples) {
    if (s.name === name && !Number.isNaN(s.value) && (!latest || s.value > latest.value)) latest = s;
  }
  if (!latest) return { maxLora: 0, runningAdapters: [], waitingAdapters: [] };
  const maxLora = Number.parseInt(latest.labels.max_lora ?? "", 10);
  return {
    maxLora: Number.isFinite(maxLora) && maxLora > 0 ? Math.min(maxLora, UINT32_MAX) : 0,
    runningAdapters: adapterList(latest.labels.running_lora_adapters),
    waitingAdapters: adapterList(latest.labels.waiting_lora_adapters),
  };
}

const hasLabels = (s: Sample, want: HistogramName["labels"]) => !want || Object.entries(want).every(([k, v]) => s.labels[k] === v);

/** Sums the matching series of `${name}${suffix}`; null when there is none. */
function seriesTotal(samples: Sample[], h: HistogramName, suffix: string): number | null {
  let total: number | null = null;
  for (const s of samples) if (s.name === h.name + suffix && hasLabels(s, h.labels)) total = (total ?? 0) + s.value;
  return total;
}

/**
 * The first histogram of `names` present, summed over its series (one per
 * data-parallel engine). A malformed one counts as absent rather than failing
 * the scrape: it only feeds the capacity estimate, which then keeps its value.
 */
function itlTotals(samples: Sample[], names: HistogramName[]): ItlTotals | null {
  for (const h of names) {
    const count = seriesTotal(samples, h, "_count");
    if (count === null) continue;
    const sumS = seriesTotal(samples, h, "_sum");
    return sumS !== null && Number.isFinite(sumS) && sumS >= 0 && Number.isFinite(count) && count >= 0 ? { sumS, count } : null;
  }
  return null;
}

/**
 * Normalises one scrape. Throws when the engine's queue or running gauge is
 * missing (then the endpoint is not the configured engine, or not ready), or
 * when a gauge it reads is malformed: such a scrape must not count as good.
 */
export function normalise(engine: Engine, samples: Sample[]): EndpointMetrics {
  const names = NAMES[engine];
  const waiting = sumCount(samples, names.waiting);
  const running = sumCount(samples, names.running);
  if (waiting === null || running === null) {
    const missing = [waiting === null ? names.waiting : null, running === null ? names.running : null].filter(Boolean);
    throw new Error(`no ${missing.join(" or ")} in /metrics (is this a ${engine} server?)`);
  }
  let kvCacheUsage = 0;
  for (const kvName of names.kv) {
    const kv = maxFraction(samples, kvName);
    if (kv !== null) {
      kvCacheUsage = kv;
      break;
    }
  }
  const lora = names.lora ? loraInfo(samples, names.lora) : { maxLora: 0, runningAdapters: [], waitingAdapters: [] };
  const kvTokens = names.cacheInfo ? cacheTokens(samples, names.cacheInfo) : 0;
  return { waiting, running, kvCacheUsage, ...lora, itl: itlTotals(samples, names.itl), kvTokens };
}

/**
 * Blocks x tokens per block from the info gauge's labels; the smallest over
 * series (data-parallel engines each have their own cache, and a request
 * lands in one), 0 when absent or unreadable.
 */
function cacheTokens(samples: Sample[], info: { name: string; blocks: string; blockSize: string }): number {
  let tokens = 0;
  for (const s of samples) {
    if (s.name !== info.name) continue;
    const t = Number.parseInt(s.labels[info.blocks] ?? "", 10) * Number.parseInt(s.labels[info.blockSize] ?? "", 10);
    if (Number.isSafeInteger(t) && t > 0) tokens = tokens === 0 ? t : Math.min(tokens, t);
  }
  return Math.min(tokens, UINT32_MAX);
}
