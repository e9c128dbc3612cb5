// The routing state the aggregator pushes (proto/gateway.proto), as the plain
// objects the scorers read; core/wire/snapshot-decode.ts decodes it, once per
// snapshot version, never per request.
import { Admission } from "./admission-limits";
import { hashBuffer, hashBytes } from "../wire/hash";
import { Priority } from "./priority";
import { PodAdapters } from "./pod-adapters";
import { PodCache } from "./pod-cache";
import { PoolLoad } from "./pool-load";
import { SlotTable } from "./slot-table";

/**
 * Scorer weights by scorer name, as the snapshot carries them (a name no
 * scorer of this build has weighs nothing), and in the picker's order once
 * it has resolved them (scheduling/picker.ts).
 */
export class Weights {
  names: string[] = [];
  values: f64[] = [];
  /** values by the picker's scorer order; null until the picker first uses this set. */
  resolved: StaticArray<f64> | null = null;

  /** The weight of scorer `name`; 0 when not given. */
  get(name: string): f64 {
    const i = this.names.indexOf(name);
    return i < 0 ? 0 : unchecked(this.values[i]);
  }

  set(name: string, value: f64): void {
    const i = this.names.indexOf(name);
    if (i >= 0) {
      unchecked(this.values[i] = value);
      return;
    }
    this.names.push(name);
    this.values.push(value);
  }
}

/** No figure of a deadline exceeds an hour (what Envoy is handed is capped there too). */
export const MAX_DEADLINE_MS: u32 = 3_600_000;

/** Per-try deadline to a response's first byte (proto Deadlines); firstByteMs 0 = none. */
export class Deadlines {
  firstByteMs: u32 = 0;
  promptMsPerKToken: u32 = 0;
  outputMsPerToken: u32 = 0;
  assumedOutputTokens: u32 = 0;
}

/** How a kind of traffic is scored, admitted and timed (proto Profile). */
export class Profile {
  name: string = "";
  weights: Weights = new Weights();
  admission: Admission = new Admission();
  deadlines: Deadlines = new Deadlines();
}

/** One target of a canary split. */
export class Split {
  /** Index into Snapshot.models until index() resolves `target`. */
  model: i32 = 0;
  target: ModelRoute | null = null;
  weight: i32 = 0;
  /** Smooth weighted round-robin state (core/scheduling/canary.ts); per worker, since each decodes its own snapshot. */
  current: i64 = 0;
  /** The filter's counter for this split (gateway/traffic-stats.ts); -1 until first used. */
  statIndex: i32 = -1;
}

export class Endpoint {
  address: string = "";
  /** UTF-8 of `address`, encoded once so routing never re-encodes it. */
  addressBytes: ArrayBuffer = new ArrayBuffer(0);
  waiting: i32 = 0;
  running: i32 = 0;
  kvCacheUsage: f64 = 0;
  fresh: bool = false;
  maxLora: i32 = 0;
  runningAdapters: string[] = [];
  waitingAdapters: string[] = [];
  /** Relative service rate within the pool (any unit); 0 = unknown. */
  capacity: f64 = 0;
  /** KV-cache capacity in tokens; 0 = unknown. */
  kvTokens: u32 = 0;
  /** Sequences the engine runs in one batch (never 0: unknown is DEFAULT_BATCH_SLOTS). */
  batchSlots: i32 = DEFAULT_BATCH_SLOTS;
  /** Hash of `address`: the endpoint's key in the in-flight table and in rendezvous ranking. */
  addressHash: u64 = 0;
  /** Position in its pool's `endpoints`. */
  slot: i32 = 0;
  /** Its modelled KV cache in the prefix index (set when the snapshot is installed). */
  prefixCache: PodCache | null = null;
  /** The adapters this gateway placed on it, most recent first (core/fleet/adapter-slots.ts; set likewise). */
  placedAdapters: PodAdapters | null = null;
  /** This gateway's requests in flight to the endpoint when the snapshot was installed (core/scheduling/fleet-view.ts). */
  inflightBase: i32 = 0;
  /** This gateway's requests in flight to the endpoint now, as of the current decision. */
  inflight: i32 = 0;
  /** Of those, the streams not yet past their first token, and their uncached prompt tokens (core/fleet/inflight.ts). */
  prefilling: i32 = 0;
  prefillTokens: i32 = 0;
  /** Set from the shared health ledger (core/fleet/health.ts); 0 when not ejected. */
  ejectedUntilMs: u64 = 0;
  /** The filter's picks counter for this endpoint (gateway/traffic-stats.ts); -1 until first used. */
  statIndex: i32 = -1;

  /**
   * Requests sent since the scrape minus those finished since: what the
   * scraped figures do not show yet. Negative when more finished than were sent.
   */
  get sentSinceScrape(): i32 {
    return this.inflight - this.inflightBase;
  }

  /**
   * Requests on the endpoint now, queued or running: the scrape plus what
   * changed since, and never fewer than this gateway's own requests still in
   * flight there. A pod that accepts requests and never answers keeps them
   * counted however idle its metrics look.
   */
  get estimatedTotal(): f64 {
    const t = max(this.waiting + this.running + this.sentSinceScrape, this.inflight);
    return t > 0 ? <f64>t : 0;
  }

  /**
   * Sequences the pod can run at once: its batch slots, or fewer when its KV
   * cache would fill first (its running sequences over the share of the
   * cache they use; an idle pod's batch is taken at its slots).
   */
  get effectiveSlots(): f64 {
    const slots = <f64>this.batchSlots;
    if (this.running <= 0 || !(this.kvCacheUsage > MIN_KV_READING)) return slots;
    const byKv = <f64>this.running / this.kvCacheUsage;
    return byKv < slots ? byKv : slots;
  }

  /**
   * Requests ahead of a new one whose prompt is `share` of a prefill step
   * (prefillShare): those beyond the pod's room in full; this gateway's
   * streams still in their prefill by their own prompts' steps (a long
   * document keeps every step of its pod long until its first token); the
   * rest of what the pod reported waiting or was sent since (about to be
   * admitted, or being prefilled) by `share`. So a few short prompts on a
   * big idle pod are no queue, and long ones count as their prefills would
   * queue. Without `prefill` (room, not time: admission), this gateway's
   * streams count as the rest do: a pod busy prefilling has room all the same.
   */
  requestsAhead(share: f64, prefill: bool = true): f64 {
    const queued = this.estimatedWaiting;
    if (!prefill) return queued + max(<f64>(this.waiting + this.sentSinceScrape) - queued, 0) * share;
    const starting = max(<f64>(this.waiting + this.sentSinceScrape - this.prefilling) - queued, 0);
    return queued + starting * share + prefillShareOf(<f64>this.prefillTokens);
  }

  /**
   * Queued requests now: what exceeds the sequences the pod can run (its
   * batch slots, or fewer when its KV cache fills first). A pod with room
   * starts what it is sent at its next step, and what it reported waiting
   * too (a request that arrived between two steps); with a nearly full KV
   * cache there is no room, and everything not running waits.
   */
  get estimatedWaiting(): f64 {
    const slots = this.kvCacheUsage >= KV_FULL ? <f64>this.running : this.effectiveSlots;
    const w = this.estimatedTotal - slots;
    return w > 0 ? w : 0;
  }
}

/**
 * Prompt tokens an engine prefills in one step (vLLM's default
 * max_num_batched_tokens): requests that have a slot but wait for or are in
 * their prefill cost one arriving behind them in proportion to its prompt's
 * share of a step (requests alike in size take about as long).
 */
const STEP_PREFILL_TOKENS: f64 = 2048;

/** A prompt's share of one prefill step, at most 1. */
export function prefillShare(promptTokens: f64): f64 {
  return min(promptTokens / STEP_PREFILL_TOKENS, 1.0);
}

/** Prefill work in steps, uncapped: several prompts known to be prefilling add up. */
function prefillShareOf(tokens: f64): f64 {
  return tokens / STEP_PREFILL_TOKENS;
}

/** vLLM's default max_num_seqs: the batch an engine that reports none is taken to run. */
export const DEFAULT_BATCH_SLOTS: i32 = 256;
/** Below this KV use a running batch says too little about what one sequence takes. */
const MIN_KV_READING: f64 = 0.02;
/** KV use at which a pod has no memory for another sequence's prompt, free slots or not. */
const KV_FULL: f64 = 0.9;

export class Pool {
  name: string = "";
  baseModel: string = "";
  /** UTF-8 of `name` and `baseModel`, for the routing headers. */
  nameBytes: ArrayBuffer = new ArrayBuffer(0);
  baseModelBytes: ArrayBuffer = new ArrayBuffer(0);
  /** Hash of `name`: how the workers' shared queue summaries name the pool. */
  nameHash: u64 = 0;
  weights: Weights = new Weights();
  endpoints: Endpoint[] = [];
  /** Address hash -> slot, for looking endpoints up by what shared state records. */
  slots: SlotTable = new SlotTable();
  /** This worker's drain and refusal bookkeeping for the pool; kept across snapshots by the router. */
  load: PoolLoad | null = null;
  /** Bumped whenever the endpoints' ejection deadlines are set (core/fleet/health.ts): what is usable may have changed. */
  healthEpoch: u32 = 0;
}

export class ModelRoute {
  name: string = "";
  /** UTF-8 of `name`, for the x-gateway-model-name header. */
  nameBytes: ArrayBuffer = new ArrayBuffer(0);
  /** Hash of `name`: seeds its prompts' prefix keys (an adapter caches apart from its base model). */
  nameHash: u64 = 0;
  pool: i32 = 0;
  /** Non-empty when `name` is a LoRA adapter of the pool's base model. */
  adapter: string = "";
  /** Index into Snapshot.profiles until index() resolves `profile`. */
  profileIndex: i32 = 0;
  /** Its weights and admission; without profiles in the snapshot, the pool's weights and no admission. */
  profile: Profile = new Profile();
  /** The class of a request that asks for none. */
  priority: Priority = Priority.Standard;
  /** Canary targets; empty when requests for `name` are served as `name`. */
  splits: Split[] = [];
  splitTotal: i32 = 0;
  /** The filter's counters for this model (gateway/traffic-stats.ts); -1 until first used. */
  statIndex: i32 = -1;
}

export class Snapshot {
  version: u64 = 0;
  generatedMs: u64 = 0;
  models: ModelRoute[] = [];
  pools: Pool[] = [];
  profiles: Profile[] = [];
  private byName: Map<string, ModelRoute> = new Map();
  /** Models by the hash of their name's UTF-8 (nameHash), so a request's model is found from its bytes. */
  private byHash: Map<u64, ModelRoute> = new Map();

  poolNamed(name: string): Pool | null {
    for (let i = 0; i < this.pools.length; i++) if (this.pools[i].name == name) return this.pools[i];
    return null;
  }

  find(model: string): ModelRoute | null {
    return this.byName.has(model) ? this.byName.get(model) : null;
  }

  /** The model whose name is the `len` UTF-8 bytes at `ptr`, without making a string of them. */
  findBytes(ptr: usize, len: i32): ModelRoute | null {
    const h = hashBytes(ptr, len);
    if (this.byHash.has(h)) {
      const m = this.byHash.get(h);
      if (m.nameBytes.byteLength == len && memory.compare(changetype<usize>(m.nameBytes), ptr, <usize>len) == 0) return m;
    }
    // Two names of one hash: the later one is found by its string.
    return this.find(String.UTF8.decodeUnsafe(ptr, <usize>len));
  }

  /**
   * Indexes models by name, encodes the names the filter sends as headers,
   * and resolves their profiles and split targets;
   * false if a model names a pool, profile or target that does not exist.
   */
  index(): bool {
    for (let i = 0; i < this.pools.length; i++) {
      const pool = this.pools[i];
      pool.nameBytes = String.UTF8.encode(pool.name);
      pool.nameHash = hashBuffer(pool.nameBytes);
      pool.baseModelBytes = String.UTF8.encode(pool.baseModel);
    }
    const models = this.models;
    for (let i = 0; i < models.length; i++) {
      const m = models[i];
      if (m.pool < 0 || m.pool >= this.pools.length) return false;
      m.nameBytes = String.UTF8.encode(m.name);
      m.nameHash = hashBuffer(m.nameBytes);
      this.byName.set(m.name, m);
      if (!this.byHash.has(m.nameHash)) this.byHash.set(m.nameHash, m);
      if (this.profiles.length == 0) {
        // An older aggregator: score with the pool's weights, admit everything.
        m.profile = new Profile();
        m.profile.weights = this.pools[m.pool].weights;
      } else if (m.profileIndex < 0 || m.profileIndex >= this.profiles.length) {
        return false;
      } else {
        m.profile = this.profiles[m.profileIndex];
      }
      let total: i64 = 0;
      for (let k = 0; k < m.splits.length; k++) {
        const split = m.splits[k];
        if (split.model < 0 || split.model >= models.length || split.weight <= 0) return false;
        split.target = models[split.model];
        total += split.weight;
      }
      if (total > i32.MAX_VALUE) return false;
      m.splitTotal = <i32>total;
    }
    return true;
  }
}


/**
 * `pods` (per address hash) without the endpoints `snap` no longer has, once
 * those outnumber the current ones: pods come and go for days, and a departed
 * pod's entry matches nothing (it is in no pool).
 */
export function retainCurrent<T>(pods: Map<u64, T>, snap: Snapshot): Map<u64, T> {
  let current = 0;
  for (let p = 0; p < snap.pools.length; p++) current += snap.pools[p].endpoints.length;
  if (pods.size <= 2 * current + 16) return pods;
  const kept = new Map<u64, T>();
  for (let p = 0; p < snap.pools.length; p++) {
    const endpoints = snap.pools[p].endpoints;
    for (let i = 0; i < endpoints.length; i++) {
      const h = unchecked(endpoints[i]).addressHash;
      if (pods.has(h)) kept.set(h, pods.get(h));
    }
  }
  return kept;
}
