// Entry point of the standalone build (build/native.wasm + asc's raw JS
// bindings) that Node tests, the simulator and tools load. It exposes the very
// Router and FleetView the Envoy filter runs, with no proxy-wasm host
// underneath: what the filter keeps in shared data (the in-flight table, the
// prefix log) is handed in and out as bytes, so a caller running several
// instances (one per simulated Envoy worker) shares them as Envoy would.
import { ApiKind } from "./core/request";
import { Router } from "./core/router";
import { decodeSnapshot } from "./core/snapshot";
import { jsonString } from "./core/errors";
import { StaleViewPolicy } from "./core/view";
import { HealthLedger, HealthRules } from "./core/health";
import { FleetView } from "./core/fleet-view";
import { InflightTable } from "./core/inflight";
import { PrefixDecision } from "./core/prefix-index";
import { appendRecords, LOG_BYTES, PrefixLogReader } from "./core/prefix-log";
import { hashBuffer, mix64 } from "./core/hash";

let router = new Router(1);
let view = new FleetView();
let inflight = new InflightTable();
let health = new HealthLedger();
let logReader = new PrefixLogReader();
let writer: u32 = 1;
let version: u64 = 0;
const scratch = new PrefixDecision();
// The filter passes Envoy's clock; the native build is told the time. By
// default the view was heard from just now, so routing is never blind.
let nowMs: u64 = 1;
view.heardMs = 1;

/** Starts over: a new tie-break sequence for `seed`, and no snapshot, counts or prefix history. */
export function reset(seed: u64): void {
  const policy = router.policy;
  router = new Router(seed);
  router.policy = policy;
  view = new FleetView();
  view.heardMs = nowMs;
  inflight = new InflightTable();
  health = new HealthLedger();
  logReader = new PrefixLogReader();
  // Distinct seeds give distinct writer ids, so instances tell their records apart.
  writer = <u32>mix64(seed) | 1;
}

/** Sets the clock and when the aggregator was last heard from (0 = never). */
export function setClock(now: u64, heard: u64): void {
  nowMs = now;
  view.heardMs = heard;
}

/** Sets how old the view may get and what to do past that (0 fail open, 1 reject). */
export function setViewPolicy(maxAgeMs: u64, stalePolicy: i32): void {
  router.policy.maxAgeMs = maxAgeMs;
  router.policy.stalePolicy = <StaleViewPolicy>stalePolicy;
}

/** Passive health as the filter records it: a failure (true) or success of `address` at the clock's now. */
export function recordOutcome(address: string, failed: bool, ejectAfter: u32, ejectMs: u64): void {
  const rules = new HealthRules();
  rules.threshold = ejectAfter;
  rules.ejectMs = ejectMs;
  if (failed) health.recordFailure(address, nowMs, rules);
  else health.recordSuccess(address);
  if (view.current != null) health.applyTo(view.current!);
}

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

/** Loads the shared in-flight table (as the filter reads its shared-data key); false if the bytes are not one. */
export function setInflight(bytes: Uint8Array): bool {
  return inflight.decode(bytes.dataStart, bytes.byteLength);
}

/** The in-flight table after this instance's changes, to share with the others. */
export function inflightTable(): Uint8Array {
  const out = new Uint8Array(inflight.encodedLength());
  inflight.encodeInto(out.dataStart);
  return out;
}

/** A routed request to `address` ended (the filter does this when the stream is done). */
export function release(address: string): void {
  inflight.add(hashBuffer(String.UTF8.encode(address)), -1);
}

/** This instance's count for `address` in its loaded table. */
export function inflightOf(address: string): i32 {
  return inflight.get(hashBuffer(String.UTF8.encode(address)));
}

/**
 * One refresh tick's exchange of prefix decisions: replays the other
 * instances' records in `log` (empty to start one), appends this instance's
 * new ones and returns the log to share.
 */
export function exchangePrefixLog(log: Uint8Array): Uint8Array {
  logReader.replay(log.dataStart, log.byteLength, writer, router.prefixes, scratch);
  const n = router.drainPending();
  const out = new Uint8Array(LOG_BYTES);
  if (log.byteLength == LOG_BYTES) memory.copy(out.dataStart, log.dataStart, <usize>LOG_BYTES);
  logReader.cursor = appendRecords(out.dataStart, log.byteLength == LOG_BYTES ? LOG_BYTES : 0, router.pendingDecisions, n, writer);
  return out;
}

/**
 * Routes one request body exactly as the filter does. `kind`: 0 chat,
 * 1 completions, 2 other /v1/ paths. Returns a JSON object:
 * {"endpoint": "ip:port" | null, "fallbacks": [...], "pool", "model", "stream",
 * "prompt": [start, end]} (endpoint null when the view is too old to rank) or
 * {"status": N, "error": {message, type, param, code}} (the OpenAI error body).
 */
export function route(body: Uint8Array, kind: i32): string {
  if (!router.route(body.dataStart, body.byteLength, <ApiKind>kind, view, inflight, nowMs)) {
    const e = router.error!;
    // toJson() is {"error":{...}}: splice the status in front of its member.
    return '{"status":' + e.status.toString() + "," + e.toJson().substring(1);
  }
  const ranked = router.ranked;
  let fallbacks = "";
  for (let i = 1; i < ranked.length; i++) fallbacks += (i > 1 ? "," : "") + jsonString(ranked[i].address);
  const req = router.body;
  return '{"endpoint":' + (ranked.length > 0 ? jsonString(ranked[0].address) : "null") +
    ',"fallbacks":[' + fallbacks + "]" +
    ',"pool":' + jsonString(router.pool!.name) +
    ',"model":' + jsonString(req.model) +
    ',"stream":' + (req.stream ? "true" : "false") +
    ',"prompt":[' + req.promptStart.toString() + "," + req.promptEnd.toString() + "]}";
}
