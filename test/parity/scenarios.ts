// Seeded parity scenarios: fleets of 1 to 64 pods per pool with loads drawn
// from small ranges (so scores tie often and the tie-break's random sequence
// is exercised), request bodies good and bad, and the clock, ticks,
// heartbeats and stream ends in between.
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";
import { Rng } from "../../testing/fixtures/rng.js";
import type { PoolMsg, SnapshotMsg } from "../../host/proto.js";
import type { InferencePath, ParityEvent } from "./events.js";

const POOL_MODELS = ["llama-3.1-8b", "qwen3-32b", "mistral-7b"];
const ADAPTERS = ["sql-lora", "chat-lora", "org/model:v2"];
const PATHS: readonly InferencePath[] = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"];

// Long shared system prompts (3-6 KiB), so prefix keys exist and repeat.
const SYSTEMS = ["support", "billing", "travel"].map((topic, i) =>
  `You are the ${topic} assistant. `.repeat(100 * (i + 1)),
);

function randomPool(rng: Rng, index: number, size: number, prefixes: boolean): PoolMsg {
  const endpoints = Array.from({ length: size }, (_, i) => endpoint(`10.${index}.${i >> 8}.${i & 255}:8000`, {
    waiting: rng.pick([0, 0, 0, 1, 2, 5]),
    running: rng.pick([0, 0, 1, 4]),
    // Mostly small batches, so that queues (and refusals) happen.
    batchSlots: rng.pick([1, 4, 4, 256]),
    kvCacheUsage: rng.pick([0, 0, 0.25, 0.5, 0.9, 1]),
    fresh: rng.chance(0.85),
    maxLora: rng.pick([0, 2, 4]),
    runningAdapters: ADAPTERS.filter(() => rng.chance(0.3)),
    waitingAdapters: ADAPTERS.filter(() => rng.chance(0.1)),
  }));
  return pool(`pool-${index}`, POOL_MODELS[index], endpoints, {
    queue: rng.pick([0, 1, 2]),
    kvCache: rng.pick([0, 1, 2]),
    running: rng.pick([0, 1]),
    lora: rng.pick([0, 1]),
    ...(prefixes ? { prefix: rng.pick([0, 2, 4]) } : {}),
  });
}

/** 1-3 pools, one of 1 pod, one of 64 when there are three; adapters served by pool 0. */
export function randomSnapshot(rng: Rng, version: number, prefixes = false, traffic = false, queueing = false): SnapshotMsg {
  const sizes = [rng.pick([1, 2, 3, 8]), 64, rng.range(1, 64)].slice(0, rng.range(1, 3));
  const pools = sizes.map((size, i) => randomPool(rng, i, size, prefixes));
  const snap = snapshot(pools, ADAPTERS.filter(() => rng.chance(0.7)), version);
  return traffic ? withTraffic(rng, snap, queueing) : snap;
}

/**
 * One profile per pool (its weights; admission mostly on, with limits low
 * enough that the scenario's queues reach them), a random default class per
 * model, and CANARY split over the served models.
 */
function withTraffic(rng: Rng, snap: SnapshotMsg, queueing: boolean): SnapshotMsg {
  const profiles = snap.pools.map((p) => ({
    name: `profile-${p.name}`,
    weights: p.weights,
    admission: {
      enabled: rng.chance(0.8),
      maxWaiting: rng.pick([1, 2, 3]),
      maxKvCache: rng.pick([0.5, 0.95]),
      sheddableFactor: rng.pick([0.5, 1]),
      criticalFactor: rng.pick([1, 2]),
      maxRetryAfterS: rng.pick([5, 60]),
      // Wait budgets (a class may have none: refused at once), some shorter than the clock's steps.
      ...(queueing
        ? { waitCriticalMs: rng.pick([0, 4_000, 60_000]), waitStandardMs: rng.pick([0, 1_000, 3_000]), waitSheddableMs: rng.pick([0, 500, 2_000]) }
        : { waitCriticalMs: 0, waitStandardMs: 0, waitSheddableMs: 0 }),
    },
  }));
  const priorities = ["STANDARD", "CRITICAL", "SHEDDABLE"];
  const models = snap.models.map((m) => ({ ...m, profile: m.pool, priority: rng.pick(priorities), splits: [] as Array<{ model: number; weight: number }> }));
  const targets = models.map((_, i) => ({ model: i, weight: rng.range(1, 9) })).filter(() => rng.chance(0.6));
  if (targets.length > 0) {
    models.push({ name: CANARY, pool: models[targets[0].model].pool, adapter: "", profile: models[targets[0].model].pool, priority: rng.pick(priorities), splits: targets });
  }
  return { ...snap, models, profiles } as SnapshotMsg;
}

const CANARY = "canary";
const PRIORITY_HEADERS = [undefined, undefined, "critical", "standard", "sheddable", "SHEDDABLE", "urgent"];

function randomBody(rng: Rng, path: InferencePath, prefixes: boolean, traffic: boolean): string {
  const served = traffic ? [...POOL_MODELS, ...ADAPTERS, CANARY, CANARY] : [...POOL_MODELS, ...ADAPTERS];
  const model = rng.chance(0.9) ? rng.pick(served) : rng.pick(["gpt-4o", ""]);
  const stream = rng.pick(["", "", ',"stream":true', ',"stream":false', ',"stream":true', ',"stream":false', ',"stream":null', ',"stream":"yes"']);
  const system = prefixes && rng.chance(0.4) ? `{"role":"system","content":${JSON.stringify(rng.pick(SYSTEMS))}},` : "";
  const prompt = path === "/v1/completions" ? '"prompt":"Say hi"'
    : path === "/v1/chat/completions" ? `"messages":[${system}{"role":"user","content":"hi"}]`
    : '"input":"embed me"';
  const good = `{"model":${JSON.stringify(model)},${prompt}${stream}}`;
  switch (rng.int(30)) {
    case 0: return "";
    case 1: return good.slice(0, rng.int(good.length));
    case 2: return `{"messages":[]}`;
    case 3: return `{"model":7,${prompt}}`;
    case 4: return `{"model":${JSON.stringify(model)}}`;
    default: return good;
  }
}

export interface ScenarioOptions {
  requests: number;
  /** Largest clock step; past the view-age bound the view goes stale unless a heartbeat comes. */
  maxAdvanceMs: number;
  /** Halfway through, the aggregator falls silent this long (then a tick). */
  silenceMs: number;
  /** Envoy workers the requests are spread over (default 1). */
  workers?: number;
  /** Long shared system prompts and pools scoring prefixes (default false). */
  prefixes?: boolean;
  /** Streams may end in 5xx or on another pod (default true); each native worker keeps its own health ledger, the filter's is shared. */
  failures?: boolean;
  /** Profiles with admission, default classes, a canary split, and priority headers (default false). */
  traffic?: boolean;
  /** With traffic: profiles hold requests (wait budgets), so requests are held and released (default false). */
  queueing?: boolean;
}

/** A request before any snapshot, the first snapshot and tick, then a random mix of everything, with one long silence. */
export function randomScenario(seed: number, options: ScenarioOptions): ParityEvent[] {
  const rng = new Rng(seed);
  const events: ParityEvent[] = [];
  const open: string[] = [];
  const addresses: string[] = [];
  let version = 0;
  let requests = 0;
  const publish = () => {
    const snap = randomSnapshot(rng, ++version, options.prefixes ?? false, options.traffic ?? false, options.queueing ?? false);
    addresses.splice(0, addresses.length, ...snap.pools.flatMap((p) => p.endpoints.map((e) => e.address)));
    events.push({ type: "snapshot", snapshot: snap });
  };
  const request = () => {
    const id = `r${requests++}`;
    const path = rng.pick(PATHS);
    const worker = (options.workers ?? 1) > 1 ? rng.int(options.workers!) : 0;
    const traffic = options.traffic ?? false;
    const priority = traffic ? rng.pick(PRIORITY_HEADERS) : undefined;
    events.push({ type: "request", id, path, body: randomBody(rng, path, options.prefixes ?? false, traffic), chunks: rng.range(1, 3), trailers: rng.chance(0.15), worker, priority });
    open.push(id);
  };
  request();
  publish();
  events.push({ type: "tick" });
  while (requests < options.requests) {
    if (requests === options.requests >> 1) events.push({ type: "advance", ms: options.silenceMs }, { type: "tick" });
    const r = rng.int(100);
    if (r < 55) request();
    else if (r < 75 && open.length > 0) {
      const id = open.splice(rng.int(open.length), 1)[0];
      const failures = options.failures ?? true;
      const status = failures ? rng.pick([200, 200, 200, 503, 500, undefined]) : rng.pick([200, 200, undefined]);
      const upstream = failures && rng.chance(0.2) ? rng.pick(addresses) : undefined;
      events.push({ type: "done", id, status, upstream });
    } else if (r < 82) publish();
    else if (r < 84) events.push({ type: "snapshot", snapshot: Uint8Array.of(0x0a, 0xff) });
    else if (r < 91) events.push({ type: "advance", ms: rng.int(options.maxAdvanceMs + 1) });
    else if (r < 97) events.push({ type: "tick" });
    else events.push({ type: "heartbeat" });
  }
  return events;
}
