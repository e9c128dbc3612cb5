// The routing state the aggregator pushes (proto/gateway.proto), decoded into
// plain objects the scorers read. Decoding happens once per snapshot version,
// never per request.
import { hashBuffer } from "./hash";
import { PodCache } from "./prefix-index";
import { ProtoReader } from "./proto";
import { SlotTable } from "./slot-table";

export class Weights {
  queue: f64 = 0;
  kvCache: f64 = 0;
  running: f64 = 0;
  lora: f64 = 0;
  prefix: f64 = 0;
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
  /** Hash of `address`: the endpoint's key in the in-flight table and in rendezvous ranking. */
  addressHash: u64 = 0;
  /** Position in its pool's `endpoints`. */
  slot: i32 = 0;
  /** Its modelled KV cache in the prefix index (set when the snapshot is installed). */
  prefixCache: PodCache | null = null;
  /** This gateway's requests in flight to the endpoint when the snapshot was installed (core/fleet-view.ts). */
  inflightBase: i32 = 0;
  /** This gateway's requests in flight to the endpoint now, as of the current decision. */
  inflight: i32 = 0;
  /** Set from the shared health ledger (core/health.ts); 0 when not ejected. */
  ejectedUntilMs: u64 = 0;

  /**
   * Requests sent since the scrape minus those finished since: what the
   * scraped figures do not show yet. Negative when more finished than were sent.
   */
  get sentSinceScrape(): i32 {
    return this.inflight - this.inflightBase;
  }

  /** Queued requests now: new requests queue first, finished ones make room for queued ones. */
  get estimatedWaiting(): f64 {
    const w = this.waiting + this.sentSinceScrape;
    return w > 0 ? <f64>w : 0;
  }

  /** Requests on the endpoint now, queued or running. */
  get estimatedTotal(): f64 {
    const t = this.waiting + this.running + this.sentSinceScrape;
    return t > 0 ? <f64>t : 0;
  }
}

export class Pool {
  name: string = "";
  baseModel: string = "";
  weights: Weights = new Weights();
  endpoints: Endpoint[] = [];
  /** Address hash -> slot, for looking endpoints up by what shared state records. */
  slots: SlotTable = new SlotTable();
}

export class ModelRoute {
  name: string = "";
  /** Hash of `name`: seeds its prompts' prefix keys (an adapter caches apart from its base model). */
  nameHash: u64 = 0;
  pool: i32 = 0;
  /** Non-empty when `name` is a LoRA adapter of the pool's base model. */
  adapter: string = "";
}

export class Snapshot {
  version: u64 = 0;
  generatedMs: u64 = 0;
  models: ModelRoute[] = [];
  pools: Pool[] = [];
  private byName: Map<string, ModelRoute> = new Map();

  find(model: string): ModelRoute | null {
    return this.byName.has(model) ? this.byName.get(model) : null;
  }

  /** Indexes models by name; false if a model names a pool that does not exist. */
  index(): bool {
    for (let i = 0; i < this.models.length; i++) {
      const m = this.models[i];
      if (m.pool < 0 || m.pool >= this.pools.length) return false;
      m.nameHash = hashBuffer(String.UTF8.encode(m.name));
      this.byName.set(m.name, m);
    }
    return true;
  }
}

// Queue and batch figures are counts: uint32 on the wire, capped here so that
// adding in-flight requests to them can never overflow an i32.
const MAX_COUNT: u32 = 1 << 30;

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
    else r.skip(tag & 7);
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
    else r.skip(tag & 7);
  }
  return r.ok ? m : null;
}

/** Null if a weight is negative or not finite: the picker multiplies scores by it. */
function decodeWeights(r: ProtoReader): Weights | null {
  const w = new Weights();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if ((tag & 7) != 5) {
      r.skip(tag & 7);
      continue;
    }
    const v = <f64>r.float();
    if (!isFinite(v) || v < 0) return null;
    if (field == 1) w.queue = v;
    else if (field == 2) w.kvCache = v;
    else if (field == 3) w.running = v;
    else if (field == 4) w.lora = v;
    else if (field == 5) w.prefix = v;
  }
  return r.ok ? w : null;
}

function decodePool(r: ProtoReader): Pool | null {
  const p = new Pool();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if (field == 1 && (tag & 7) == 2) p.name = r.string();
    else if (field == 2 && (tag & 7) == 2) p.baseModel = r.string();
    else if (field == 3 && (tag & 7) == 2) {
      const w = decodeWeights(r.message());
      if (w == null) return null;
      p.weights = w;
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
    else r.skip(wire);
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
