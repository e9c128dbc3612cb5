/**
 * A pure, virtual-time model of a vLLM (V1) engine: continuous batching in
 * steps with chunked prefill, KV block allocation with prefix caching and
 * recompute preemption, and LoRA slots. No timers, I/O or randomness: the
 * caller owns the clock (milliseconds) and drives it with submit/advanceTo,
 * so a real-time server and a discrete-event simulator share this code.
 *
 * Step lifecycle: a step starts at time t (batch fixed, blocks allocated),
 * lasts a computed duration, and its effects (tokens, finished requests,
 * cached blocks) land at its end, where the next step starts. Requests
 * arriving mid-step wait for the next step boundary, as in vLLM. A step
 * starting at t takes every request submitted at times <= t: `submit(_, t)`
 * only settles what happened strictly before t, and `advanceTo(t)` closes
 * the books up to and including t.
 */
import { BlockPool } from "./blocks.js";
import { type EngineConfig, type EngineConfigInput, resolveEngineConfig } from "./config.js";
import { Deque } from "./deque.js";
import { E2E_BUCKETS_S, Histogram, type HistogramSnapshot, ITL_BUCKETS_S, TTFT_BUCKETS_S } from "./histogram.js";
import { LoraTracker } from "./lora.js";
import { blockHashes, countTokens } from "./prompt.js";

export interface EngineRequestInput {
  id: string;
  /** Prompt text; ~charsPerToken characters per token. */
  prompt: string;
  maxTokens: number;
  /** LoRA adapter name; undefined for the base model. */
  adapter?: string;
}

export interface RequestStats {
  id: string;
  adapter?: string;
  arrival: number;
  promptTokens: number;
  outputTokens: number;
  /** Prompt tokens served from the prefix cache at first admission. */
  cachedTokens: number;
  preemptions: number;
  /** Time from arrival to first token (queue time included); undefined if none was produced. */
  ttftMs?: number;
  e2eMs: number;
  /** Absolute time of every output token. */
  tokenTimes: number[];
}

export type EngineEvent =
  | { type: "token"; id: string; time: number; index: number }
  | { type: "preempted"; id: string; time: number }
  | { type: "finished"; id: string; time: number; reason: "length" | "abort"; stats: RequestStats };

export type RejectCode = "duplicate_id" | "invalid_request" | "context_length_exceeded" | "lora_disabled";

export class RequestRejectedError extends Error {
  constructor(
    message: string,
    readonly code: RejectCode,
  ) {
    super(message);
    this.name = "RequestRejectedError";
  }
}

export interface EngineCounters {
  submitted: number;
  finished: number;
  aborted: number;
  preemptions: number;
  /** Prompt tokens of requests that produced their first token. */
  promptTokens: number;
  generationTokens: number;
  loraLoads: number;
  /** Prefix-cache lookups and hits, in tokens (vLLM semantics). */
  prefixCacheQueries: number;
  prefixCacheHits: number;
}

export interface EngineMetrics {
  model: string;
  time: number;
  numRunning: number;
  numWaiting: number;
  /** Blocks held by requests / numGpuBlocks; cached-but-free blocks are not used. */
  kvUsage: number;
  usedBlocks: number;
  blockSize: number;
  numGpuBlocks: number;
  maxLoras: number;
  runningAdapters: string[];
  waitingAdapters: string[];
  residentAdapters: string[];
  /** Resident for good (pinAdapter), whether or not a request uses them. */
  pinnedAdapters: string[];
  /** Sum of prompt + max output tokens over running requests (TGI's batch max tokens). */
  batchMaxTokens: number;
  counters: EngineCounters;
  ttft: HistogramSnapshot;
  e2e: HistogramSnapshot;
  /** Time between consecutive output tokens of a request (vLLM's inter-token latency). */
  itl: HistogramSnapshot;
}

type State = "waiting" | "running" | "done";

interface Req {
  id: string;
  adapter: string | undefined;
  arrival: number;
  promptTokens: number;
  maxTokens: number;
  hashes: number[];
  /** Prompt plus tokens sampled so far: what must be in KV before the next sample. */
  numTokens: number;
  numComputed: number;
  output: number;
  blocks: number[];
  /** Prompt blocks already registered in the prefix cache. */
  registered: number;
  cachedTokens: number;
  admitted: boolean;
  preemptions: number;
  tokenTimes: number[];
  state: State;
}

interface Step {
  end: number;
  reqs: Req[];
  tokens: number[];
}

export class Engine {
  /** Live configuration; `speed` and cost fields may be changed between steps. */
  readonly config: EngineConfig;
  private readonly pool: BlockPool;
  private readonly lora = new LoraTracker();
  private readonly requests = new Map<string, Req>();
  private readonly waiting = new Deque<Req>();
  /** Admission order: the newest running request is last (preempted first). */
  private running: Req[] = [];
  private inFlight: Step | undefined;
  /** Time of the next step start when no step is in flight; undefined when idle. */
  private startAt: number | undefined;
  private clock = 0;
  private batchMaxTokens = 0;
  private events: EngineEvent[] = [];
  private readonly counters: EngineCounters = {
    submitted: 0,
    finished: 0,
    aborted: 0,
    preemptions: 0,
    promptTokens: 0,
    generationTokens: 0,
    loraLoads: 0,
    prefixCacheQueries: 0,
    prefixCacheHits: 0,
  };
  private readonly ttft = new Histogram(TTFT_BUCKETS_S);
  private readonly e2e = new Histogram(E2E_BUCKETS_S);
  private readonly itl = new Histogram(ITL_BUCKETS_S);

  constructor(config: EngineConfigInput, startTime = 0) {
    this.config = resolveEngineConfig(config);
    this.pool = new BlockPool(this.config.numGpuBlocks);
    this.clock = startTime;
  }

  /** Virtual time the engine has been advanced to. */
  get now(): number {
    return this.clock;
  }

  /** Longest prompt + output a request may need. */
  get maxRequestTokens(): number {
    return Math.min(this.config.maxModelLen, this.config.numGpuBlocks * this.config.blockSize);
  }

  /** When the engine next has something to do (a step ends or starts), or Infinity when idle. */
  nextEventTime(): number {
    return this.inFlight?.end ?? this.startAt ?? Infinity;
  }

  /**
   * Queue a request arriving at `now` (>= engine time), after settling steps
   * that end strictly before `now`; it joins the first step starting at or
   * after `now`. Throws RequestRejectedError for requests vLLM would refuse
   * up front. Returns the prompt length in tokens.
   */
  submit(input: EngineRequestInput, now: number): number {
    this.process(now, false);
    const cfg = this.config;
    if (this.requests.has(input.id)) throw new RequestRejectedError(`duplicate request id ${input.id}`, "duplicate_id");
    if (!Number.isInteger(input.maxTokens) || input.maxTokens < 1) {
      throw new RequestRejectedError("max_tokens must be a positive integer", "invalid_request");
    }
    if (input.adapter !== undefined && cfg.maxLoras < 1) {
      throw new RequestRejectedError("LoRA is not enabled on this engine", "lora_disabled");
    }
    const promptTokens = countTokens(input.prompt, cfg.charsPerToken, cfg.tokenizer);
    if (promptTokens + input.maxTokens > this.maxRequestTokens) {
      throw new RequestRejectedError(
        `This model's maximum context length is ${this.maxRequestTokens} tokens; the request needs ` +
          `${promptTokens} prompt + ${input.maxTokens} output tokens.`,
        "context_length_exceeded",
      );
    }
    const req: Req = {
      id: input.id,
      adapter: input.adapter,
      arrival: now,
      promptTokens,
      maxTokens: input.maxTokens,
      // Adapters seed their own hash chain: vLLM never shares KV across LoRAs.
      hashes: blockHashes(input.prompt, input.adapter ?? cfg.model, cfg.blockSize, cfg.charsPerToken, cfg.tokenizer),
      numTokens: promptTokens,
      numComputed: 0,
      output: 0,
      blocks: [],
      registered: 0,
      cachedTokens: 0,
      admitted: false,
      preemptions: 0,
      tokenTimes: [],
      state: "waiting",
    };
    this.requests.set(req.id, req);
    this.waiting.pushBack(req);
    if (req.adapter !== undefined) this.lora.enqueue(req.adapter);
    this.counters.submitted++;
    this.wake(now);
    return promptTokens;
  }

  /**
   * Loads `adapter` into a LoRA slot now, at no cost, and never evicts it: a
   * server started with the adapter already in GPU memory. Throws if LoRA is
   * off or every slot is pinned already.
   */
  pinAdapter(adapter: string): void {
    if (this.config.maxLoras < 1) throw new RangeError(`cannot pin ${adapter}: LoRA is not enabled on this engine`);
    this.lora.pin(adapter, this.config.maxLoras);
  }

  /** Cancel a request (client went away). Returns false if it is unknown or already finished. */
  abort(id: string, now: number): boolean {
    this.process(now, false);
    const req = this.requests.get(id);
    if (!req) return false;
    if (req.state === "waiting") this.waiting.remove((r) => r === req);
    else this.running = this.running.filter((r) => r !== req);
    this.finish(req, now, "abort");
    this.wake(now);
    return true;
  }

  /** Run every step that ends at or before `t` and return all events since the last call. */
  advanceTo(t: number): EngineEvent[] {
    this.process(t, true);
    const out = this.events;
    this.events = [];
    return out;
  }

  /** Prompt tokens of a prompt (by its block hashes) that this engine's prefix cache would serve now. */
  cachedTokens(hashes: readonly number[], promptTokens: number): number {
    return this.cachedPrefix(hashes, promptTokens).length * this.config.blockSize;
  }

  /** vLLM always recomputes at least the last prompt token, so a hit stops one short. */
  private cachedPrefix(hashes: readonly number[], promptTokens: number) {
    return this.pool.match(hashes, Math.floor((promptTokens - 1) / this.config.blockSize));
  }

  requestState(id: string): "waiting" | "running" | undefined {
    const s = this.requests.get(id)?.state;
    return s === "done" ? undefined : s;
  }

  metrics(): EngineMetrics {
    const cfg = this.config;
    return {
      model: cfg.model,
      time: this.clock,
      numRunning: this.running.length,
      numWaiting: this.waiting.length,
      kvUsage: this.pool.numUsed / this.pool.numBlocks,
      usedBlocks: this.pool.numUsed,
      blockSize: cfg.blockSize,
      numGpuBlocks: cfg.numGpuBlocks,
      maxLoras: cfg.maxLoras,
      runningAdapters: this.lora.runningAdapters(),
      waitingAdapters: this.lora.waitingAdapters(),
      residentAdapters: this.lora.residentAdapters(),
      pinnedAdapters: this.lora.pinnedAdapters(),
      batchMaxTokens: this.batchMaxTokens,
      counters: { ...this.counters },
      ttft: this.ttft.snapshot(),
      e2e: this.e2e.snapshot(),
      itl: this.itl.snapshot(),
    };
  }

  /** Run step ends and starts before t (or at t too, if `inclusive`). */
  private process(t: number, inclusive: boolean): void {
    if (!(t >= this.clock)) throw new RangeError(`engine time cannot go back from ${this.clock} to ${t}`);
    const due = (x: number): boolean => (inclusive ? x <= t : x < t);
    for (;;) {
      if (this.inFlight && due(this.inFlight.end)) {
        const step = this.inFlight;
        this.clock = step.end;
        this.inFlight = undefined;
        this.complete(step);
        this.wake(step.end);
      } else if (this.startAt !== undefined && due(this.startAt)) {
        const start = this.startAt;
        this.clock = start;
        this.startAt = undefined;
        this.schedule(start);
      } else {
        break;
      }
    }
    this.clock = t;
  }

  /** If no step is in flight or pending and there is work, start one at t. */
  private wake(t: number): void {
    if (this.inFlight || this.startAt !== undefined) return;
    if (this.running.length > 0 || this.waiting.length > 0) this.startAt = t;
  }

  /** Pick the next batch at time t (vLLM V1 scheduler order) and start its step, or go idle. */
  private schedule(t: number): void {
    const cfg = this.config;
    const bs = cfg.blockSize;
    let budget = cfg.maxNumBatchedTokens;
    const reqs: Req[] = [];
    const tokens: number[] = [];
    let decodeSeqs = 0;
    let decodeContextTokens = 0;
    let prefillTokens = 0;
    /** Sum over prefilled tokens of the context ahead of each, in thousands (the attention term). */
    let prefillContextK = 0;
    let loads = 0;
    let preempted = false;

    // Running requests first, oldest first; out of KV, preempt the newest.
    for (let i = 0; i < this.running.length && budget > 0; i++) {
      const req = this.running[i];
      const n = Math.min(req.numTokens - req.numComputed, budget);
      let fits = true;
      while (!this.grow(req, req.numComputed + n)) {
        const victim = this.running.pop() as Req;
        this.preempt(victim, t);
        preempted = true;
        if (victim === req) {
          fits = false;
          break;
        }
      }
      if (!fits) break;
      reqs.push(req);
      tokens.push(n);
      budget -= n;
      if (n === 1 && req.output > 0) {
        decodeSeqs++;
        decodeContextTokens += req.numTokens;
      } else {
        prefillTokens += n;
        prefillContextK += (n * (req.numComputed + n / 2)) / 1000;
      }
    }

    // Then admit waiting requests, unless memory was just short (as vLLM V1).
    if (!preempted) {
      const skipped: Req[] = [];
      while (budget > 0 && this.running.length < cfg.maxNumSeqs) {
        const req = this.waiting.peek();
        if (!req) break;
        // An adapter that cannot join the batch does not block other requests.
        if (req.adapter !== undefined && !this.lora.canRun(req.adapter, cfg.maxLoras)) {
          skipped.push(this.waiting.popFront() as Req);
          continue;
        }
        const hit = this.cachedPrefix(req.hashes, req.numTokens);
        const computed = hit.length * bs;
        const n = Math.min(req.numTokens - computed, budget);
        const fresh = Math.ceil((computed + n) / bs) - hit.length;
        if (fresh + this.pool.countUnreferenced(hit) > this.pool.numFree) break;

        this.waiting.popFront();
        for (const b of hit) this.pool.acquire(b);
        req.blocks = hit;
        req.registered = hit.length;
        req.numComputed = computed;
        this.grow(req, computed + n);
        this.counters.prefixCacheQueries += req.numTokens;
        this.counters.prefixCacheHits += computed;
        if (!req.admitted) {
          req.admitted = true;
          req.cachedTokens = computed;
        }
        if (req.adapter !== undefined && this.lora.admit(req.adapter, cfg.maxLoras)) loads++;
        req.state = "running";
        this.running.push(req);
        this.batchMaxTokens += req.promptTokens + req.maxTokens;
        reqs.push(req);
        tokens.push(n);
        budget -= n;
        prefillTokens += n;
        prefillContextK += (n * (computed + n / 2)) / 1000;
      }
      for (let i = skipped.length - 1; i >= 0; i--) this.waiting.pushFront(skipped[i]);
    }

    if (reqs.length === 0) return;
    this.counters.loraLoads += loads;
    const decodeMs = decodeSeqs * cfg.decodeMsPerSeq + (decodeContextTokens / 1000) * cfg.decodeMsPerKTokens;
    const prefillMs = prefillTokens * cfg.prefillMsPerToken + prefillContextK * cfg.prefillMsPerKTokens;
    const computeMs = (cfg.stepOverheadMs + decodeMs + prefillMs) / cfg.speed;
    // Adapter loads happen synchronously inside the step, stalling the whole batch.
    this.inFlight = { end: t + computeMs + loads * cfg.loraLoadMs, reqs, tokens };
  }

  /** Apply a finished step: advance KV, cache full prompt blocks, sample tokens. */
  private complete(step: Step): void {
    const bs = this.config.blockSize;
    const t = step.end;
    let finishedAny = false;
    for (let k = 0; k < step.reqs.length; k++) {
      const req = step.reqs[k];
      if (req.state !== "running") continue; // aborted while the step ran
      req.numComputed += step.tokens[k];
      const full = Math.min(Math.floor(req.numComputed / bs), req.hashes.length);
      for (; req.registered < full; req.registered++) this.pool.register(req.blocks[req.registered], req.hashes[req.registered]);
      if (req.numComputed < req.numTokens) continue; // more prefill chunks to go

      const index = req.output++;
      req.tokenTimes.push(t);
      this.counters.generationTokens++;
      if (index === 0) {
        this.ttft.observe((t - req.arrival) / 1000);
        this.counters.promptTokens += req.promptTokens;
      } else {
        this.itl.observe((t - req.tokenTimes[index - 1]) / 1000);
      }
      this.events.push({ type: "token", id: req.id, time: t, index });
      if (req.output >= req.maxTokens) {
        this.finish(req, t, "length");
        finishedAny = true;
      } else {
        req.numTokens++;
      }
    }
    if (finishedAny) this.running = this.running.filter((r) => r.state === "running");
  }

  /** Ensure `req` holds blocks for `tokens` tokens; false if the pool cannot supply them. */
  private grow(req: Req, tokens: number): boolean {
    const need = Math.ceil(tokens / this.config.blockSize) - req.blocks.length;
    if (need > this.pool.numFree) return false;
    for (let i = 0; i < need; i++) req.blocks.push(this.pool.allocate());
    return true;
  }

  /** Recompute preemption: drop the request's KV and put it at the front of the queue. */
  private preempt(req: Req, t: number): void {
    this.pool.release(req.blocks);
    req.blocks = [];
    req.numComputed = 0;
    req.registered = 0;
    req.preemptions++;
    req.state = "waiting";
    this.batchMaxTokens -= req.promptTokens + req.maxTokens;
    if (req.adapter !== undefined) this.lora.requeue(req.adapter);
    this.waiting.pushFront(req);
    this.counters.preemptions++;
    this.events.push({ type: "preempted", id: req.id, time: t });
  }

  /** Release everything `req` holds; the caller has already taken it off its queue. */
  private finish(req: Req, t: number, reason: "length" | "abort"): void {
    const wasRunning = req.state === "running";
    this.pool.release(req.blocks);
    req.blocks = [];
    req.state = "done";
    this.requests.delete(req.id);
    if (wasRunning) this.batchMaxTokens -= req.promptTokens + req.maxTokens;
    if (req.adapter !== undefined) this.lora.leave(req.adapter, wasRunning);
    const e2eMs = t - req.arrival;
    if (reason === "length") {
      this.counters.finished++;
      this.e2e.observe(e2eMs / 1000);
    } else {
      this.counters.aborted++;
    }
    const stats: RequestStats = {
      id: req.id,
      adapter: req.adapter,
      arrival: req.arrival,
      promptTokens: req.promptTokens,
      outputTokens: req.output,
      cachedTokens: req.cachedTokens,
      preemptions: req.preemptions,
      ttftMs: req.tokenTimes.length > 0 ? req.tokenTimes[0] - req.arrival : undefined,
      e2eMs,
      tokenTimes: req.tokenTimes,
    };
    this.events.push({ type: "finished", id: req.id, time: t, reason, stats });
  }
}
