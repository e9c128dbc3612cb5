// Entry point of the standalone build (build/native.wasm + asc's raw JS
// bindings) that Node tests, the simulator and tools load. It exposes the very
// Router the Envoy filter runs, with no proxy-wasm host underneath.
import { ApiKind } from "./core/request";
import { Router } from "./core/router";
import { decodeSnapshot, Snapshot } from "./core/snapshot";
import { jsonString } from "./core/errors";

let router = new Router(1);
let snapshot: Snapshot | null = null;

/** Restarts the tie-break random sequence, for reproducible runs. */
export function reset(seed: u64): void {
  router = new Router(seed);
}

/** Loads a serialized llmgateway.v1.Snapshot; false if it does not decode. */
export function setSnapshot(bytes: Uint8Array): bool {
  const decoded = decodeSnapshot(bytes.dataStart, bytes.byteLength);
  if (decoded == null) return false;
  snapshot = decoded;
  return true;
}

/**
 * Routes one request body exactly as the filter does. `kind`: 0 chat,
 * 1 completions, 2 other /v1/ paths. Returns a JSON object:
 * {"endpoint": "ip:port", "model", "stream", "prompt": [start, end]} or
 * {"status": N, "error": {message, type, param, code}} (the OpenAI error body).
 */
export function route(body: Uint8Array, kind: i32): string {
  const endpoint = router.route(body.dataStart, body.byteLength, <ApiKind>kind, snapshot);
  if (endpoint == null) {
    const e = router.error!;
    // toJson() is {"error":{...}}: splice the status in front of its member.
    return '{"status":' + e.status.toString() + "," + e.toJson().substring(1);
  }
  const req = router.body;
  return '{"endpoint":' + jsonString(endpoint.address) +
    ',"model":' + jsonString(req.model) +
    ',"stream":' + (req.stream ? "true" : "false") +
    ',"prompt":[' + req.promptStart.toString() + "," + req.promptEnd.toString() + "]}";
}
