// The routing state the aggregator pushes (proto/gateway.proto), decoded into
// plain objects the scorers read. Decoding happens once per snapshot version,
// never per request.
import { Admission, MAX_WAIT_BUDGET_MS } from "./admission-limits";
import { hashBuffer } from "../wire/hash";
import { Priority } from "./priority";
import { PodAdapters } from "./pod-adapters";
import { PodCache } from "./pod-cache";
import { PoolLoad } from "./pool-load";
import { ProtoReader } from "../wire/proto";
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

  poolNamed(name: string): Pool | null {
    for (let i = 0; i < this.pools.length; i++) if (this.pools[i].name == name) return this.pools[i];
    return null;
  }

  find(model: string): ModelRoute | null {
    return this.byName.has(model) ? this.byName.get(model) : null;
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

// Queue and batch figures are counts: uint32 on the wire, capped here so that
// adding in-flight requests to them can never overflow an i32.
const MAX_COUNT: u32 = 1 << 30;

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

/** Decodes a Snapshot message; null if the bytes (or any nested message) are not a valid snapshot. */
export function decodeSnapshot(ptr: usize, len: i32): Snapshot | null {
  const r = ProtoReader.over(ptr, len);
  const snap = new Snapshot();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if (field == 1 && (tag & 7) == 0) snap.version = r.varint();
    else if (field == 2 && (tag & 7) == 2) {
      const m = decodeModel(r.message());
      if (m == null) r.ok = false;
      else snap.models.push(m);
    } else if (field == 3 && (tag & 7) == 2) {
      const p = decodePool(r.message());
      if (p == null) r.ok = false;
      else snap.pools.push(p);
    } else if (field == 4 && (tag & 7) == 0) snap.generatedMs = r.varint();
    else if (field == 5 && (tag & 7) == 2) {
      const p = decodeProfile(r.message());
      if (p == null) r.ok = false;
      else snap.profiles.push(p);
    } else r.skip(tag & 7);
  }
  if (!r.ok || !snap.index()) return null;
  return snap;
}

function decodeModel(r: ProtoReader): ModelRoute | null {
  const m = new ModelRoute();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if (field == 1 && (tag & 7) == 2) m.name = r.string();
    else if (field == 2 && (tag & 7) == 0) m.pool = <i32>r.varint();
    else if (field == 3 && (tag & 7) == 2) m.adapter = r.string();
    else if (field == 4 && (tag & 7) == 0) m.profileIndex = index(r.varint());
    else if (field == 5 && (tag & 7) == 0) {
      const p = <i32>r.varint();
      if (p != Priority.Standard && p != Priority.Critical && p != Priority.Sheddable) return null;
      m.priority = <Priority>p;
    } else if (field == 6 && (tag & 7) == 2) {
      const split = decodeSplit(r.message());
      if (split == null) return null;
      m.splits.push(split);
    } else r.skip(tag & 7);
  }
  return r.ok ? m : null;
}

function decodeSplit(r: ProtoReader): Split | null {
  const s = new Split();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if (field == 1 && (tag & 7) == 0) s.model = index(r.varint());
    else if (field == 2 && (tag & 7) == 0) s.weight = index(r.varint());
    else r.skip(tag & 7);
  }
  return r.ok ? s : null;
}

function decodeProfile(r: ProtoReader): Profile | null {
  const p = new Profile();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if (field == 1 && (tag & 7) == 2) p.name = r.string();
    else if (field == 5 && (tag & 7) == 2) {
      if (!decodeWeight(r.message(), p.weights)) return null;
    } else if (field == 3 && (tag & 7) == 2) {
      const a = decodeAdmission(r.message());
      if (a == null) return null;
      p.admission = a;
    } else if (field == 4 && (tag & 7) == 2) {
      p.deadlines = decodeDeadlines(r.message());
    } else r.skip(tag & 7);
  }
  return r.ok ? p : null;
}

function decodeDeadlines(r: ProtoReader): Deadlines {
  const d = new Deadlines();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if ((tag & 7) != 0) {
      r.skip(tag & 7);
      continue;
    }
    const v = <u32>min<u64>(r.varint(), <u64>MAX_DEADLINE_MS);
    if (field == 1) d.firstByteMs = v;
    else if (field == 2) d.promptMsPerKToken = v;
    else if (field == 3) d.outputMsPerToken = v;
    else if (field == 4) d.assumedOutputTokens = v;
  }
  return d;
}

/** No figure of a deadline exceeds an hour (what Envoy is handed is capped there too). */
export const MAX_DEADLINE_MS: u32 = 3_600_000;

/** Null if a limit is out of its range: a bad limit must not refuse (or admit) everything silently. */
function decodeAdmission(r: ProtoReader): Admission | null {
  const a = new Admission();
  // Absent budgets are 0 (proto3 drops zeros): an aggregator that names none gets immediate refusals, never holding.
  for (let i = 0; i < 3; i++) unchecked(a.waitBudgetMs[i] = 0);
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    const wire = tag & 7;
    if (field == 1 && wire == 0) a.enabled = r.varint() != 0;
    else if (field == 2 && wire == 5) a.maxWaiting = <f64>r.float();
    else if (field == 3 && wire == 5) a.maxKvCache = <f64>r.float();
    else if (field == 4 && wire == 5) a.sheddableFactor = <f64>r.float();
    else if (field == 5 && wire == 5) a.criticalFactor = <f64>r.float();
    else if (field == 6 && wire == 0) a.maxRetryAfterS = <u32>r.varint();
    else if (field == 7 && wire == 0) a.waitBudgetMs[Priority.Critical] = budget(r.varint());
    else if (field == 8 && wire == 0) a.waitBudgetMs[Priority.Standard] = budget(r.varint());
    else if (field == 9 && wire == 0) a.waitBudgetMs[Priority.Sheddable] = budget(r.varint());
    else r.skip(wire);
  }
  return r.ok && a.valid() ? a : null;
}

/** A wait budget off the wire; one past the bound fails Admission.valid(). */
function budget(v: u64): u32 {
  return v > <u64>MAX_WAIT_BUDGET_MS ? MAX_WAIT_BUDGET_MS + 1 : <u32>v;
}

/** An index or weight (uint32 on the wire) as a non-negative i32; out-of-range values fail index(). */
function index(v: u64): i32 {
  return v > <u64>i32.MAX_VALUE ? -1 : <i32>v;
}

/** Null if a weight is negative or not finite: the picker multiplies scores by it. */
/** One entry of a map<string, float> of weights into `w`; false when the value is not a finite weight >= 0. */
function decodeWeight(r: ProtoReader, w: Weights): bool {
  let name = "";
  let v: f64 = 0;
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if (field == 1 && (tag & 7) == 2) name = r.string();
    else if (field == 2 && (tag & 7) == 5) v = <f64>r.float();
    else r.skip(tag & 7);
  }
  if (!r.ok || !isFinite(v) || v < 0) return false;
  w.set(name, v);
  return true;
}

function decodePool(r: ProtoReader): Pool | null {
  const p = new Pool();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if (field == 1 && (tag & 7) == 2) p.name = r.string();
    else if (field == 2 && (tag & 7) == 2) p.baseModel = r.string();
    else if (field == 5 && (tag & 7) == 2) {
      if (!decodeWeight(r.message(), p.weights)) return null;
    } else if (field == 4 && (tag & 7) == 2) {
      const e = decodeEndpoint(r.message());
      if (e == null) return null;
      e.slot = p.endpoints.length;
      p.endpoints.push(e);
      p.slots.set(e.addressHash, e.slot);
    } else r.skip(tag & 7);
  }
  return r.ok ? p : null;
}

function decodeEndpoint(r: ProtoReader): Endpoint | null {
  const e = new Endpoint();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    const wire = tag & 7;
    if (field == 1 && wire == 2) {
      e.address = r.string();
      e.addressBytes = String.UTF8.encode(e.address);
      e.addressHash = hashBuffer(e.addressBytes);
    } else if (field == 2 && wire == 0) e.waiting = count(r.varint());
    else if (field == 3 && wire == 0) e.running = count(r.varint());
    else if (field == 4 && wire == 5) e.kvCacheUsage = <f64>r.float();
    else if (field == 5 && wire == 0) e.fresh = r.varint() != 0;
    else if (field == 6 && wire == 0) e.maxLora = count(r.varint());
    else if (field == 7 && wire == 2) e.runningAdapters.push(r.string());
    else if (field == 8 && wire == 2) e.waitingAdapters.push(r.string());
    else if (field == 9 && wire == 5) e.capacity = <f64>r.float();
    else if (field == 10 && wire == 0) e.kvTokens = <u32>r.varint();
    else if (field == 11 && wire == 0) {
      const slots = count(r.varint());
      if (slots > 0) e.batchSlots = slots;
    } else r.skip(wire);
  }
  if (!r.ok) return null;
  // A usage outside 0..1 (or NaN) is a broken scrape, not a reading: do not
  // route on it, and score it as a full cache should every endpoint be stale.
  if (!(e.kvCacheUsage >= 0 && e.kvCacheUsage <= 1)) {
    e.kvCacheUsage = 1;
    e.fresh = false;
  }
  // A rate that is not a positive number is unknown, not zero speed.
  if (!(e.capacity > 0 && e.capacity < f64.MAX_VALUE)) e.capacity = 0;
  return e;
}

/** A uint32 count (proto3 truncates the varint to 32 bits), capped at MAX_COUNT. */
function count(v: u64): i32 {
  const n = <u32>v;
  return <i32>(n > MAX_COUNT ? MAX_COUNT : n);
}
