// The snapshot side of the native build: installs one as a worker's refresh
// tick does, and gives back what was decoded, so a test can check every field
// the aggregator encodes reaches the router.
import { Deadlines, Endpoint, ModelRoute, Pool, Profile, Weights } from "../core/fleet/snapshot";
import { decodeSnapshot } from "../core/wire/snapshot-decode";
import { Admission } from "../core/fleet/admission-limits";
import { jsonString } from "../core/openai/errors";
import { Priority } from "../core/fleet/priority";
import { health, inflight, router, view } from "./instance";

let version: u64 = 0;

/**
 * Installs a serialized llmgateway.v1.Snapshot as a worker's refresh tick
 * does, taking the in-flight counts loaded last (setInflight) as the
 * baseline; false if it does not decode.
 */
export function setSnapshot(bytes: Uint8Array): bool {
  const decoded = decodeSnapshot(bytes.dataStart, bytes.byteLength);
  if (decoded == null) return false;
  view.offer(++version, view.heardMs);
  view.install(decoded, version, inflight, health, router.prefixes);
  return true;
}

/**
 * The installed snapshot as decoded, in JSON keyed by the .proto's field names
 * (protobufjs' camelCase), or "null": lets a test check that every field the
 * aggregator encodes reaches the router with its value.
 */
export function snapshotJson(): string {
  const s = view.current;
  if (s == null) return "null";
  return "{" + num("version", <f64>s.version) + "," + num("generatedUnixMs", <f64>s.generatedMs) +
    ',"models":[' + list<ModelRoute>(s.models, modelJson) + '],"pools":[' + list<Pool>(s.pools, poolJson) +
    '],"profiles":[' + list<Profile>(s.profiles, profileJson) + "]}";
}

function num(key: string, v: f64): string {
  return jsonString(key) + ":" + (<f64><i64>v == v ? (<i64>v).toString() : v.toString());
}

function str(key: string, v: string): string {
  return jsonString(key) + ":" + jsonString(v);
}

function flag(key: string, v: bool): string {
  return jsonString(key) + ":" + (v ? "true" : "false");
}

function list<T>(items: T[], json: (item: T) => string): string {
  let out = "";
  for (let i = 0; i < items.length; i++) out += (i > 0 ? "," : "") + json(items[i]);
  return out;
}

function modelJson(m: ModelRoute): string {
  let splits = "";
  for (let i = 0; i < m.splits.length; i++) {
    splits += (i > 0 ? ",{" : "{") + num("model", <f64>m.splits[i].model) + "," + num("weight", <f64>m.splits[i].weight) + "}";
  }
  return "{" + str("name", m.name) + "," + num("pool", <f64>m.pool) + "," + str("adapter", m.adapter) + "," +
    num("profile", <f64>m.profileIndex) + "," + num("priority", <f64>m.priority) + ',"splits":[' + splits + "]}";
}

function weightsJson(w: Weights): string {
  let out = "{";
  for (let i = 0; i < w.names.length; i++) out += (i > 0 ? "," : "") + num(w.names[i], w.values[i]);
  return out + "}";
}

function admissionJson(a: Admission): string {
  return "{" + flag("enabled", a.enabled) + "," + num("maxWaiting", a.maxWaiting) + "," + num("maxKvCache", a.maxKvCache) + "," +
    num("sheddableFactor", a.sheddableFactor) + "," + num("criticalFactor", a.criticalFactor) + "," +
    num("maxRetryAfterS", <f64>a.maxRetryAfterS) + "," + num("waitCriticalMs", <f64>a.waitBudgetMs[Priority.Critical]) + "," +
    num("waitStandardMs", <f64>a.waitBudgetMs[Priority.Standard]) + "," + num("waitSheddableMs", <f64>a.waitBudgetMs[Priority.Sheddable]) + "}";
}

function deadlinesJson(d: Deadlines): string {
  return "{" + num("firstByteMs", <f64>d.firstByteMs) + "," + num("promptMsPerKtoken", <f64>d.promptMsPerKToken) + "," +
    num("outputMsPerToken", <f64>d.outputMsPerToken) + "," + num("assumedOutputTokens", <f64>d.assumedOutputTokens) + "}";
}

function profileJson(p: Profile): string {
  return "{" + str("name", p.name) + ',"weights":' + weightsJson(p.weights) + ',"admission":' + admissionJson(p.admission) +
    ',"deadlines":' + deadlinesJson(p.deadlines) + "}";
}

function stringsJson(items: string[]): string {
  return list<string>(items, (s: string): string => jsonString(s));
}

function endpointJson(e: Endpoint): string {
  return "{" + str("address", e.address) + "," + num("waiting", <f64>e.waiting) + "," + num("running", <f64>e.running) + "," +
    num("kvCacheUsage", e.kvCacheUsage) + "," + flag("fresh", e.fresh) + "," + num("maxLora", <f64>e.maxLora) + "," +
    '"runningAdapters":[' + stringsJson(e.runningAdapters) + '],"waitingAdapters":[' + stringsJson(e.waitingAdapters) + "]," +
    num("capacity", e.capacity) + "," + num("kvTokens", <f64>e.kvTokens) + "," + num("batchSlots", <f64>e.batchSlots) + "}";
}

function poolJson(p: Pool): string {
  return "{" + str("name", p.name) + "," + str("baseModel", p.baseModel) + ',"weights":' + weightsJson(p.weights) +
    ',"endpoints":[' + list<Endpoint>(p.endpoints, endpointJson) + "]}";
}
