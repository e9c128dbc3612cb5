// Entry point of the standalone build (build/native.wasm + asc's raw JS
// bindings) that Node tests, the simulator and tools load. It exposes the very
// Router the Envoy filter runs, with no proxy-wasm host underneath.
import { ApiKind } from "./core/request";
import { Router } from "./core/router";
import { decodeSnapshot, Snapshot } from "./core/snapshot";
import { jsonString } from "./core/errors";
import { StaleViewPolicy } from "./core/view";
import { HealthLedger, HealthRules } from "./core/health";

let router = new Router(1);
let snapshot: Snapshot | null = null;
// The filter passes Envoy's clock; the native build is told the time. By
// default the view was heard from just now, so routing is never blind.
let nowMs: u64 = 1;
let heardMs: u64 = 1;
let health = new HealthLedger();

/** Restarts the tie-break random sequence, for reproducible runs. */
export function reset(seed: u64): void {
  const policy = router.policy;
  router = new Router(seed);
  router.policy = policy;
  health = new HealthLedger();
}

/** Sets the clock and when the aggregator was last heard from (0 = never). */
export function setClock(now: u64, heard: u64): void {
  nowMs = now;
  heardMs = heard;
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
  if (snapshot != null) health.applyTo(snapshot!);
}

/** Loads a serialized llmgateway.v1.Snapshot; false if it does not decode. */
export function setSnapshot(bytes: Uint8Array): bool {
  const decoded = decodeSnapshot(bytes.dataStart, bytes.byteLength);
  if (decoded == null) return false;
  health.applyTo(decoded);
  snapshot = decoded;
  return true;
}

/**
 * Routes one request body exactly as the filter does. `kind`: 0 chat,
 * 1 completions, 2 other /v1/ paths. Returns a JSON object:
 * {"endpoint": "ip:port" | null, "fallbacks": [...], "pool", "model", "stream",
 * "prompt": [start, end]} (endpoint null when the view is too old to rank) or
 * {"status": N, "error": {message, type, param, code}} (the OpenAI error body).
 */
export function route(body: Uint8Array, kind: i32): string {
  if (!router.route(body.dataStart, body.byteLength, <ApiKind>kind, snapshot, nowMs, heardMs)) {
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
