// Maps engine-specific Prometheus metrics to the engine-neutral numbers the
// Endpoint Picker scores on.
import type { Engine } from "../config.js";
import type { Sample } from "./scrape.js";

export interface EndpointMetrics {
  /** Requests queued, not yet running. */
  waiting: number;
  /** Requests in the running batch. */
  running: number;
  /** KV-cache utilisation, 0..1. */
  kvCacheUsage: number;
  /** LoRA adapter slots (vLLM `max_lora`); 0 when unknown or not a LoRA server. */
  maxLora: number;
  /** Sorted, de-duplicated adapter names. */
  runningAdapters: string[];
  waitingAdapters: string[];
}

interface EngineMetricNames {
  waiting: string;
  running: string;
  /** In order of preference; the first present wins. */
  kv: string[];
  lora?: string;
}

const NAMES: Record<Engine, EngineMetricNames> = {
  vllm: {
    waiting: "vllm:num_requests_waiting",
    running: "vllm:num_requests_running",
    // kv_cache_usage_perc since vLLM 0.9.2 (V1); gpu_cache_usage_perc before.
    kv: ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    lora: "vllm:lora_requests_info",
  },
  sglang: {
    waiting: "sglang:num_queue_reqs",
    running: "sglang:num_running_reqs",
    kv: ["sglang:token_usage"],
  },
  // TGI exports no KV-cache gauge at all; kvCacheUsage is reported as 0, so
  // the KV scorer treats every TGI pod alike and queue/running decide.
  tgi: {
    waiting: "tgi_queue_size",
    running: "tgi_batch_current_size",
    kv: [],
  },
};

const wantedSet = (n: EngineMetricNames): ReadonlySet<string> => new Set([n.waiting, n.running, ...n.kv, ...(n.lora ? [n.lora] : [])]);
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
  return { waiting, running, kvCacheUsage, ...lora };
}
