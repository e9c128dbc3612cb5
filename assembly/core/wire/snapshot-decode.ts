// The Snapshot message (proto/gateway.proto) decoded into the fleet view's
// classes; anything malformed, however deeply nested, refuses the whole
// snapshot.
import { Admission, MAX_WAIT_BUDGET_MS } from "../fleet/admission-limits";
import { Priority } from "../fleet/priority";
import { Deadlines, Endpoint, MAX_DEADLINE_MS, ModelRoute, Pool, Profile, Snapshot, Split, Weights } from "../fleet/snapshot";
import { hashBuffer } from "./hash";
import { ProtoReader } from "./proto";

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
