// A realistic vLLM (0.13, V1 engine) /metrics page (the scale benchmark's pods serve it):
// the families a real server exports, in its order (prometheus_client's
// process_ and python_ collectors first, the FastAPI instrumentator's http_
// families, then vllm:), with its labels, its histogram buckets and the
// _created series prometheus_client adds to counters and histograms. About
// 60 KB, and most of it is histogram buckets the aggregator does not read.
//
// Cheap to serve thousands of times a second: everything the aggregator does
// not read is rendered once per pod; the part it reads (the gauges, the LoRA
// info and the inter-token latency histogram) is rendered on every scrape,
// with new values each time.
import { pyFloat } from "./metrics.js";

type Labels = Record<string, string>;
/** What the aggregator reads from a page; it moves on every scrape. */
export interface PodState {
  waiting: number;
  running: number;
  kv: number;
  itlCount: number;
  itlSumS: number;
  nowS: number;
}
/** A fixed value, or one read from the pod's state at each render. */
type Value = number | ((s: PodState) => number);

const labelText = (labels: Labels) => {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  return parts.length > 0 ? `{${parts.join(",")}}` : "";
};

/** Exposition text with its sample values left open until render: the label text is built once. */
class Lines {
  private readonly parts: Array<string | { prefix: string; value: (s: PodState) => number }> = [];
  header(name: string, type: "gauge" | "counter" | "histogram" | "summary", help: string): this {
    this.parts.push(`# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`);
    return this;
  }
  sample(name: string, labels: Labels, value: Value): this {
    const prefix = `${name}${labelText(labels)} `;
    this.parts.push(typeof value === "number" ? `${prefix}${pyFloat(value)}\n` : { prefix, value });
    return this;
  }
  gauge(name: string, help: string, labels: Labels, value: Value): this {
    return this.header(name, "gauge", help).sample(name, labels, value);
  }
  counter(name: string, help: string, series: Array<[Labels, number]>, createdS: number): this {
    // HELP/TYPE name counters without _total, as prometheus_client does.
    this.header(name.replace(/_total$/, ""), "counter", help);
    for (const [labels, value] of series) this.sample(name, labels, value);
    for (const [labels] of series) this.sample(name.replace(/_total$/, "_created"), labels, createdS);
    return this;
  }
  /** `count` observations spread evenly over the buckets. */
  histogram(name: string, help: string, labels: Labels, bounds: readonly number[], count: Value, sum: Value, createdS: number): this {
    const share = (i: number): Value => (typeof count === "number" ? Math.round((count * i) / (bounds.length + 1)) : (s) => Math.round((count(s) * i) / (bounds.length + 1)));
    this.header(name, "histogram", help);
    bounds.forEach((b, i) => this.sample(`${name}_bucket`, { ...labels, le: pyFloat(b) }, share(i + 1)));
    this.sample(`${name}_bucket`, { ...labels, le: "+Inf" }, count);
    this.sample(`${name}_count`, labels, count);
    this.sample(`${name}_sum`, labels, sum);
    this.header(`${name}_created`, "gauge", help);
    return this.sample(`${name}_created`, labels, createdS);
  }
  render(s: PodState): string {
    let out = "";
    for (const p of this.parts) out += typeof p === "string" ? p : `${p.prefix}${pyFloat(p.value(s))}\n`;
    return out;
  }
}

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py).
const TTFT_S = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0];
const ITL_S = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const REQUEST_S = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0];
const TOKENS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];
const ITERATION_TOKENS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];
const HTTP_HIGHR_S = [0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10, 30, 60];
const HTTP_S = [0.1, 0.5, 1];

const MODEL = "meta-llama/Llama-3.1-8B-Instruct";
const HANDLERS = ["/v1/chat/completions", "/v1/completions", "/metrics", "/health", "/v1/models"];

/** The page's parts that stay the same: rendered once per pod (values differ per pod, not per scrape). */
function staticParts(seed: number, createdS: number): { head: Lines; tail: Lines } {
  const l = { engine: "0", model_name: MODEL };
  const head = new Lines();
  const generations = (value: (g: number) => number) => [0, 1, 2].map((g): [Labels, number] => [{ generation: String(g) }, value(g)]);
  head
    .counter("python_gc_objects_collected_total", "Objects collected during gc", generations((g) => 1000 * (seed + g)), createdS)
    .counter("python_gc_objects_uncollectable_total", "Uncollectable objects found during GC", generations(() => 0), createdS)
    .counter("python_gc_collections_total", "Number of times this generation was collected", generations((g) => Math.round((9000 + seed) / 10 ** g)), createdS)
    .gauge("python_info", "Python platform information", { implementation: "CPython", major: "3", minor: "12", patchlevel: "3", version: "3.12.3" }, 1)
    .gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", {}, 4.2e10 + seed)
    .gauge("process_resident_memory_bytes", "Resident memory size in bytes.", {}, 3.1e9 + seed)
    .gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", {}, createdS)
    .counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", [[{}, 3600 + seed]], createdS)
    .gauge("process_open_fds", "Number of open file descriptors.", {}, 120)
    .gauge("process_max_fds", "Maximum number of open file descriptors.", {}, 1048576);
  head.counter(
    "http_requests_total",
    "Total number of requests by method, status and handler.",
    HANDLERS.map((h, i): [Labels, number] => [{ handler: h, method: h.startsWith("/v1/c") ? "POST" : "GET", status: "2xx" }, 1000 * (i + 1) + seed]),
    createdS,
  );
  for (const [name, help] of [
    ["http_request_size_bytes", "Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored."],
    ["http_response_size_bytes", "Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored."],
  ]) {
    head.header(name, "summary", help);
    for (const h of HANDLERS) {
      head.sample(`${name}_count`, { handler: h }, 1000 + seed).sample(`${name}_sum`, { handler: h }, 5e6 + seed);
    }
    head.header(`${name}_created`, "gauge", help);
    for (const h of HANDLERS) head.sample(`${name}_created`, { handler: h }, createdS);
  }
  head.histogram("http_request_duration_highr_seconds", "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations.", {}, HTTP_HIGHR_S, 9000 + seed, 4321.5, createdS);
  for (const h of HANDLERS) {
    head.histogram("http_request_duration_seconds", "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important.", { handler: h, method: "POST" }, HTTP_S, 1000 + seed, 876.5, createdS);
  }

  const tail = new Lines()
    .counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", [[l, 12 + seed]], createdS)
    .counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", [[l, 4.5e6 + seed]], createdS)
    .counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", [[l, 1.2e6 + seed]], createdS)
    .counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", [[l, 4.5e6 + seed]], createdS)
    .counter("vllm:generation_tokens_total", "Number of generation tokens processed.", [[l, 2.1e6 + seed]], createdS)
    .counter(
      "vllm:request_success_total",
      "Count of successfully processed requests.",
      ["stop", "length", "abort"].map((r, i): [Labels, number] => [{ ...l, finished_reason: r }, 100 * (3 - i) + seed]),
      createdS,
    )
    .histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", l, ITERATION_TOKENS, 90000 + seed, 3.1e6, createdS)
    .histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", l, TTFT_S, 5000 + seed, 812.25, createdS)
    .histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", l, REQUEST_S, 5000 + seed, 23400.5, createdS)
    .histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", l, REQUEST_S, 5000 + seed, 410.75, createdS)
    .histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", l, REQUEST_S, 5000 + seed, 22990.5, createdS)
    .histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", l, REQUEST_S, 5000 + seed, 701.5, createdS)
    .histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", l, REQUEST_S, 5000 + seed, 22289.0, createdS)
    .histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", l, TOKENS, 5000 + seed, 4.5e6, createdS)
    .histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", l, TOKENS, 5000 + seed, 2.1e6, createdS)
    .histogram("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", l, TOKENS, 5000 + seed, 1e7, createdS)
    .histogram("vllm:request_params_n", "Histogram of the n request parameter.", l, [1, 2, 5, 10, 20], 5000 + seed, 5000, createdS)
    .histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", l, TOKENS, 5000 + seed, 1e7, createdS);
  return { head, tail };
}

/** The part the aggregator reads: gauges, LoRA and cache info, and the inter-token latency histogram. */
function liveSection(createdS: number): Lines {
  const l = { engine: "0", model_name: MODEL };
  return new Lines()
    .gauge("vllm:num_requests_running", "Number of requests in model execution batches.", l, (s) => s.running)
    .gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", l, (s) => s.waiting)
    .gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, (s) => s.kv)
    .gauge("vllm:lora_requests_info", "Running stats on lora requests.", { max_lora: "4", running_lora_adapters: "sql-lora,chat-lora", waiting_lora_adapters: "" }, (s) => s.nowS)
    .gauge(
      "vllm:cache_config_info",
      "Information of the LLMEngine CacheConfig",
      { block_size: "16", cache_dtype: "auto", enable_prefix_caching: "True", engine: "0", gpu_memory_utilization: "0.9", num_cpu_blocks: "0", num_gpu_blocks: "27000" },
      1,
    )
    .histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", l, ITL_S, (s) => s.itlCount, (s) => s.itlSumS, createdS);
}

/** One pod's page source: its fixed parts, and its live state stepped on every render. */
export class VllmPage {
  private readonly head: Buffer;
  private readonly live: Lines;
  private readonly tail: Buffer;
  private readonly state: PodState;
  private step = 0;

  constructor(private readonly seed: number) {
    const createdS = 1.7e9 + seed;
    const { head, tail } = staticParts(seed, createdS);
    this.state = { waiting: 0, running: 8, kv: 0.3, itlCount: 10_000, itlSumS: 250, nowS: createdS };
    this.head = Buffer.from(head.render(this.state));
    this.tail = Buffer.from(tail.render(this.state));
    this.live = liveSection(createdS);
  }

  /**
   * The next page, in three parts to write as they are. Every routing value
   * moves (the running batch walks, KV usage drifts by more than the
   * aggregator's 0.001 quantum), so each scrape changes the pod's snapshot
   * entry; the queue is `waiting`, which a reader can use to tell which
   * scrape a snapshot carries.
   */
  next(nowS: number, waiting: number): Buffer[] {
    const s = this.state;
    this.step++;
    s.nowS = nowS;
    s.waiting = waiting;
    s.running = 8 + ((this.seed + this.step) % 9);
    s.kv = Math.round((0.3 + 0.3 * Math.abs(Math.sin((this.seed + this.step) / 7))) * 1e4) / 1e4;
    s.itlCount += 200;
    s.itlSumS += 200 * 0.025;
    return [this.head, Buffer.from(this.live.render(s)), this.tail];
  }
}
