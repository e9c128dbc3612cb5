// The routing state the aggregator pushes (proto/gateway.proto), decoded into
// plain objects the scorers read. Decoding happens once per snapshot version,
// never per request.
import { ProtoReader } from "./proto";

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
  /** Requests this picker sent since the snapshot was taken (not yet visible in its metrics). */
  pending: i32 = 0;
  /** Set from the shared health ledger (core/health.ts); 0 when not ejected. */
  ejectedUntilMs: u64 = 0;
}

export class Pool {
  name: string = "";
  baseModel: string = "";
  weights: Weights = new Weights();
  endpoints: Endpoint[] = [];
}

export class ModelRoute {
  name: string = "";
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
      this.byName.set(m.name, m);
    }
    return true;
  }
}

/** Decodes a Snapshot message; null if the bytes are not a valid snapshot. */
export function decodeSnapshot(ptr: usize, len: i32): Snapshot | null {
  const r = ProtoReader.over(ptr, len);
  const snap = new Snapshot();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if (field == 1 && (tag & 7) == 0) snap.version = r.varint();
    else if (field == 2 && (tag & 7) == 2) snap.models.push(decodeModel(r.message()));
    else if (field == 3 && (tag & 7) == 2) snap.pools.push(decodePool(r.message()));
    else if (field == 4 && (tag & 7) == 0) snap.generatedMs = r.varint();
    else r.skip(tag & 7);
  }
  if (!r.ok || !snap.index()) return null;
  return snap;
}

function decodeModel(r: ProtoReader): ModelRoute {
  const m = new ModelRoute();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if (field == 1 && (tag & 7) == 2) m.name = r.string();
    else if (field == 2 && (tag & 7) == 0) m.pool = <i32>r.varint();
    else if (field == 3 && (tag & 7) == 2) m.adapter = r.string();
    else r.skip(tag & 7);
  }
  return m;
}

function decodeWeights(r: ProtoReader): Weights {
  const w = new Weights();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if ((tag & 7) != 5) {
      r.skip(tag & 7);
      continue;
    }
    const v = <f64>r.float();
    if (field == 1) w.queue = v;
    else if (field == 2) w.kvCache = v;
    else if (field == 3) w.running = v;
    else if (field == 4) w.lora = v;
    else if (field == 5) w.prefix = v;
  }
  return w;
}

function decodePool(r: ProtoReader): Pool {
  const p = new Pool();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    if (field == 1 && (tag & 7) == 2) p.name = r.string();
    else if (field == 2 && (tag & 7) == 2) p.baseModel = r.string();
    else if (field == 3 && (tag & 7) == 2) p.weights = decodeWeights(r.message());
    else if (field == 4 && (tag & 7) == 2) p.endpoints.push(decodeEndpoint(r.message()));
    else r.skip(tag & 7);
  }
  return p;
}

function decodeEndpoint(r: ProtoReader): Endpoint {
  const e = new Endpoint();
  while (r.more()) {
    const tag = <u32>r.varint();
    const field = tag >> 3;
    const wire = tag & 7;
    if (field == 1 && wire == 2) {
      e.address = r.string();
      e.addressBytes = String.UTF8.encode(e.address);
    } else if (field == 2 && wire == 0) e.waiting = <i32>r.varint();
    else if (field == 3 && wire == 0) e.running = <i32>r.varint();
    else if (field == 4 && wire == 5) e.kvCacheUsage = <f64>r.float();
    else if (field == 5 && wire == 0) e.fresh = r.varint() != 0;
    else if (field == 6 && wire == 0) e.maxLora = <i32>r.varint();
    else if (field == 7 && wire == 2) e.runningAdapters.push(r.string());
    else if (field == 8 && wire == 2) e.waitingAdapters.push(r.string());
    else r.skip(wire);
  }
  return e;
}
