// Maps engine-specific Prometheus metrics to the engine-neutral numbers the
// Endpoint Picker scores on. What an engine does not export keeps its
// "unknown" value: kvCacheUsage 0, maxLora 0 with empty adapter lists, itl
// null (then the snapshot's capacity is 0), kvTokens 0, asleep false. docs/scorers.md "Signals per engine"
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
  /** KV-cache capacity in tokens, from the engine's cache size metrics; 0 when not exported (llama.cpp). */
  kvTokens: number;
  /** The engine says it is asleep (vLLM sleep mode): it serves nothing until woken. */
  asleep: boolean;
}

/** The two cumulative series of a time-per-token total, and the labels a series must carry to count. */
interface TotalsName {
  sum: string;
  count: string;
  labels?: Readonly<Record<string, string>>;
}

/** A Prometheus histogram's _sum and _count. */
const histogram = (name: string, labels?: TotalsName["labels"]): TotalsName => ({ sum: `${name}_sum`, count: `${name}_count`, labels });

/** Where an engine states its KV-cache size in tokens. */
type KvSize =
  /** One gauge of tokens. */
  | { tokens: string }
  /** Two gauges, blocks and tokens per block. */
  | { blocks: string; blockSize: string }
  /** An info gauge's labels, blocks and tokens per block. */
  | { info: string; blocksLabel: string; blockSizeLabel: string };

interface EngineMetricNames {
  waiting: string;
  running: string;
  /**
   * The label that tells data-parallel engines apart. Series of one such
   * engine that differ in other labels (tensor or pipeline ranks) repeat
   * its numbers, so they count once; the engines' queues add up.
   */
  dpLabel?: string;
  /** In order of preference; the first present wins. */
  kv: string[];
  lora?: string;
  /** In order of preference; the first present wins. */
  kvSize: KvSize[];
  /** A sleep-state gauge: the series whose `label` is `awake` reads 1 while the engine is awake. */
  sleep?: { name: string; label: string; awake: string };
  /** Totals of the time between output tokens, newest name first; the first present wins. */
  itl: TotalsName[];
}

const NAMES: Record<Engine, EngineMetricNames> = {
  vllm: {
    waiting: "vllm:num_requests_waiting",
    running: "vllm:num_requests_running",
    // kv_cache_usage_perc since vLLM 0.9.2 (V1); gpu_cache_usage_perc before.
    kv: ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    dpLabel: "engine",
    lora: "vllm:lora_requests_info",
    kvSize: [{ info: "vllm:cache_config_info", blocksLabel: "num_gpu_blocks", blockSizeLabel: "block_size" }],
    // One series per state (awake, weights_offloaded, discard_all), 1 for the
    // current one (vllm/v1/metrics/loggers.py; tests/entrypoints/openai/test_sleep.py).
    sleep: { name: "vllm:engine_sleep_state", label: "sleep_state", awake: "awake" },
    // One observation per output event of a request, its time since the
    // previous one (vllm/v1/metrics/loggers.py). Renamed in 0.11 (PR 24110);
    // the old name was hidden in 0.12 and removed in 0.13 (PR 32661).
    itl: [histogram("vllm:inter_token_latency_seconds"), histogram("vllm:time_per_output_token_seconds")],
  },
  // SGLang has no adapter residency metric: with LoRA on, recent releases
  // export sglang:lora_pool_slots_used / _total, counts without names, which
  // would tell the LoRA scorer nothing per adapter; maxLora stays 0 (unknown).
  sglang: {
    waiting: "sglang:num_queue_reqs",
    running: "sglang:num_running_reqs",
    // Each scheduler exports its series with its ranks as labels
    // (srt/metrics/collector.py); TP and PP ranks of one DP rank share its queue.
    dpLabel: "dp_rank",
    kv: ["sglang:token_usage"],
    // Gauges since 0.5.12; labels on the cache config info gauge before.
    kvSize: [
      { blocks: "sglang:num_pages", blockSize: "sglang:page_size" },
      { info: "sglang:cache_config_info", blocksLabel: "num_pages", blockSizeLabel: "page_size" },
    ],
    // Each streamed chunk adds its interval to _sum and its token count to
    // the buckets (srt/metrics/collector.py observe_inter_token_latency).
    itl: [histogram("sglang:inter_token_latency_seconds")],
  },
  // TGI exports no KV-cache gauge at all; kvCacheUsage is reported as 0, so
  // the KV scorer treats every TGI pod alike and queue/running decide. Its
  // adapters are loaded at start (LORA_ADAPTERS), so every pod holds them all
  // and there is no residency metric either.
  tgi: {
    waiting: "tgi_queue_size",
    running: "tgi_batch_current_size",
    kv: [],
    // The token budget of a batch, prompt and output (router/src/server.rs,
    // backends/v3/src/lib.rs): the KV the server sized itself for.
    kvSize: [{ tokens: "tgi_batch_max_total_tokens" }],
    // The wall time of each decode step, one token for every running request
    // (backends/v3 backend.rs). Not tgi_request_mean_time_per_token_duration:
    // one observation per finished request, prefill included, so it lags by a
    // whole request.
    itl: [histogram("tgi_batch_inference_duration", { method: "decode" })],
  },
  // llama.cpp's server with --metrics (tools/server/server-task.cpp
  // to_metrics): busy slots and deferred tasks, no adapter names, no cache
  // size. Its slots are its batch (-np; batchSlots). Current builds export no
  // KV gauge; older ones had kv_cache_usage_ratio (0-1), read when present.
  llamacpp: {
    waiting: "llamacpp:requests_deferred",
    running: "llamacpp:requests_processing",
    kv: ["llamacpp:kv_cache_usage_ratio"],
    kvSize: [],
    // Each finished generation adds its decoded tokens and its slot's wall
    // time generating them (server-context.cpp on_prediction): time per
    // token per sequence, as an inter-token latency histogram's sum/count.
    itl: [{ sum: "llamacpp:tokens_predicted_seconds_total", count: "llamacpp:tokens_predicted_total" }],
  },
  // TensorRT-LLM's serve, with the names the reference picker reads
  // (gateway-api-inference-extension datalayer/extractor/metrics/factories.go).
  // No adapter names; no time-per-token series under these names, so its
  // capacity is the pool's or unknown.
  trtllm: {
    waiting: "trtllm_num_requests_waiting",
    running: "trtllm_num_requests_running",
    kv: ["trtllm_kv_cache_utilization"],
    kvSize: [{ blocks: "trtllm_kv_cache_max_blocks", blockSize: "trtllm_kv_cache_tokens_per_block" }],
    itl: [],
  },
};

const kvSizeNames = (k: KvSize): string[] => ("tokens" in k ? [k.tokens] : "info" in k ? [k.info] : [k.blocks, k.blockSize]);

const wantedSet = (n: EngineMetricNames): ReadonlySet<string> =>
  new Set([
    n.waiting, n.running, ...n.kv, ...(n.lora ? [n.lora] : []), ...n.kvSize.flatMap(kvSizeNames), ...(n.sleep ? [n.sleep.name] : []),
    ...n.itl.flatMap((h) => [h.sum, h.count]),
  ]);
const WANTED = Object.fromEntries(Object.entries(NAMES).map(([e, n]) => [e, wantedSet(n)])) as Record<Engine, ReadonlySet<string>>;

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
 * A pod's count over its data-parallel engines: each engine's series (by
 * `dpLabel`) counted once, at their largest (its ranks repeat it), and the
 * engines summed, as the pod's queue is all of theirs.
 */
function sumCount(samples: Sample[], name: string, dpLabel: string | undefined): number | null {
  if (gaugeValues(samples, name) === null) return null;
  const byEngine = new Map<string, number>();
  for (const s of samples) {
    if (s.name !== name) continue;
    const engine = dpLabel === undefined ? "" : (s.labels[dpLabel] ?? "");
    byEngine.set(engine, Math.max(byEngine.get(engine) ?? 0, s.value));
  }
  let total = 0;
  for (const v of byEngine.values()) total += v;
  return Math.min(Math.round(total), UINT32_MAX);
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
 * the current state. Equal values are no rarity: llm-d's inference-sim stamps
 * whole seconds (time.Now().Unix()), so lists that changed within a second
 * tie. Ties go to the series naming more running adapters (they were in use
 * that second: counting them keeps slots from looking freer than they may
 * be), then to the lexically first adapter lists, so the pick never depends
 * on the order of the page's series.
 */
function loraInfo(samples: Sample[], name: string): Pick<EndpointMetrics, "maxLora" | "runningAdapters" | "waitingAdapters"> {
  let latest: LoraSeries | undefined;
  for (const s of samples) {
    if (s.name !== name || Number.isNaN(s.value)) continue;
    const series = loraSeries(s);
    if (!latest || newerLoraSeries(series, latest)) latest = series;
  }
  if (!latest) return { maxLora: 0, runningAdapters: [], waitingAdapters: [] };
  const maxLora = Number.parseInt(latest.sample.labels.max_lora ?? "", 10);
  return {
    maxLora: Number.isFinite(maxLora) && maxLora > 0 ? Math.min(maxLora, UINT32_MAX) : 0,
    runningAdapters: latest.running,
    waitingAdapters: latest.waiting,
  };
}

interface LoraSeries {
  sample: Sample;
  running: string[];
  waiting: string[];
  /** The lists as one string, for the last tie-break. */
  text: string;
}

function loraSeries(sample: Sample): LoraSeries {
  const running = adapterList(sample.labels.running_lora_adapters);
  const waiting = adapterList(sample.labels.waiting_lora_adapters);
  return { sample, running, waiting, text: `${running.join(",")}|${waiting.join(",")}|${sample.labels.max_lora ?? ""}` };
}

function newerLoraSeries(a: LoraSeries, b: LoraSeries): boolean {
  if (a.sample.value !== b.sample.value) return a.sample.value > b.sample.value;
  if (a.running.length !== b.running.length) return a.running.length > b.running.length;
  return a.text < b.text;
}

const hasLabels = (s: Sample, want: TotalsName["labels"]) => !want || Object.entries(want).every(([k, v]) => s.labels[k] === v);

/** Sums the matching series of `name`; null when there is none. */
function seriesTotal(samples: Sample[], name: string, labels: TotalsName["labels"]): number | null {
  let total: number | null = null;
  for (const s of samples) if (s.name === name && hasLabels(s, labels)) total = (total ?? 0) + s.value;
  return total;
}

/**
 * The first totals of `names` present, summed over their series (one per
 * data-parallel engine). Malformed ones count as absent rather than failing
 * the scrape: they only feed the capacity estimate, which then keeps its value.
 */
function itlTotals(samples: Sample[], names: TotalsName[]): ItlTotals | null {
  for (const h of names) {
    const count = seriesTotal(samples, h.count, h.labels);
    if (count === null) continue;
    const sumS = seriesTotal(samples, h.sum, h.labels);
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
  const waiting = sumCount(samples, names.waiting, names.dpLabel);
  const running = sumCount(samples, names.running, names.dpLabel);
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
  const kvTokens = kvSizeTokens(samples, names.kvSize, names.dpLabel);
  const asleep = names.sleep ? isAsleep(samples, names.sleep) : false;
  return { waiting, running, kvCacheUsage, ...lora, itl: itlTotals(samples, names.itl), kvTokens, asleep };
}

/** Asleep when an engine's `awake` series reads 0: a request sent to it would wait for a wake-up. */
function isAsleep(samples: Sample[], sleep: { name: string; label: string; awake: string }): boolean {
  return samples.some((s) => s.name === sleep.name && s.labels[sleep.label] === sleep.awake && s.value === 0);
}

/** The first of `sizes` the page has, in tokens; 0 when none. */
function kvSizeTokens(samples: Sample[], sizes: KvSize[], dpLabel: string | undefined): number {
  for (const size of sizes) {
    const tokens = "info" in size ? cacheInfoTokens(samples, size) : gaugeTokens(samples, size, dpLabel);
    if (tokens > 0) return Math.min(tokens, UINT32_MAX);
  }
  return 0;
}

/**
 * From gauges, per data-parallel engine (its ranks repeat its numbers); the
 * smallest engine's, as a request lands in one.
 */
function gaugeTokens(samples: Sample[], size: { tokens: string } | { blocks: string; blockSize: string }, dpLabel: string | undefined): number {
  const engineOf = (s: Sample) => (dpLabel === undefined ? "" : (s.labels[dpLabel] ?? ""));
  const perEngine = (name: string) => {
    const out = new Map<string, number>();
    for (const s of samples) if (s.name === name && Number.isFinite(s.value) && s.value > 0) out.set(engineOf(s), Math.max(out.get(engineOf(s)) ?? 0, s.value));
    return out;
  };
  let tokens = 0;
  if ("tokens" in size) {
    for (const t of perEngine(size.tokens).values()) tokens = tokens === 0 ? t : Math.min(tokens, t);
    return Math.floor(tokens);
  }
  const blockSize = perEngine(size.blockSize);
  for (const [engine, blocks] of perEngine(size.blocks)) {
    const t = blocks * (blockSize.get(engine) ?? 0);
    if (t > 0) tokens = tokens === 0 ? t : Math.min(tokens, t);
  }
  return Number.isSafeInteger(Math.floor(tokens)) ? Math.floor(tokens) : 0;
}

/**
 * Blocks x tokens per block from the info gauge's labels; the smallest over
 * series (data-parallel engines each have their own cache, and a request
 * lands in one), 0 when absent or unreadable.
 */
function cacheInfoTokens(samples: Sample[], info: { info: string; blocksLabel: string; blockSizeLabel: string }): number {
  let tokens = 0;
  for (const s of samples) {
    if (s.name !== info.info) continue;
    const t = Number.parseInt(s.labels[info.blocksLabel] ?? "", 10) * Number.parseInt(s.labels[info.blockSizeLabel] ?? "", 10);
    if (Number.isSafeInteger(t) && t > 0) tokens = tokens === 0 ? t : Math.min(tokens, t);
  }
  return tokens;
}
