// What each request's outcome means. Every request falls in exactly one class:
//
//   ok          a 200 that arrived whole;
//   refused     a 429 pool_saturated with Retry-After: admission doing its
//               job (the gateway's documented answer when every pod of the
//               pool is saturated for the request's class), not a failure;
//   expected    a request that was wrong on purpose and got its documented
//               error (400 for a malformed body, 404 model_not_found, 400
//               naming x-llm-priority);
//   injected    a request the soak's own fault broke: its 200 came from pod P
//               (x-served-by), it was sent before the soak killed P, and it
//               failed mid-answer within INJECTED_WINDOW_MS after the kill;
//   unexpected  anything else: a wrong answer to a bad request, any other
//               status or connection error, a stream cut with no kill of its
//               pod in the window, a timeout.
//
// Why so narrow: a request a killed pod held before answering is retried by
// Envoy on another pod (retry_on reset / connect-failure), and a new request
// is routed around the dead pod, so neither may fail. Only an answer already
// under way cannot be moved (Envoy never retries after response headers).
// The client learns of the cut when Envoy closes its connection, which Envoy
// does ENVOY_DELAYED_CLOSE_MS after the pod's sockets closed (its default
// delayed_close_timeout: it waits that long for the client to close first;
// measured here, 1.00 s after the kill); the window adds a second for the
// event loops' lag on a busy machine.
import type { SoakRecord } from "./load.js";
import { UNKNOWN_MODEL } from "./traffic.js";

export const OUTCOMES = ["ok", "refused", "expected", "injected", "unexpected"] as const;
export type Outcome = (typeof OUTCOMES)[number];

/** Envoy's delayed_close_timeout; envoy/gateway.yaml leaves it at the default. */
export const ENVOY_DELAYED_CLOSE_MS = 1_000;
export const INJECTED_WINDOW_MS = ENVOY_DELAYED_CLOSE_MS + 1_000;

export interface Kill {
  pod: string;
  atMs: number;
}

export interface Classified {
  outcome: Outcome;
  /** What happened, in a few words; errors are counted by it. */
  kind: string;
}

const EXPECTED: Record<string, { status: number; code?: string; param?: string; kind: string }> = {
  "malformed-json": { status: 400, kind: "400 malformed JSON" },
  "unknown-model": { status: 404, code: "model_not_found", kind: `404 model_not_found (${UNKNOWN_MODEL})` },
  "bad-priority": { status: 400, param: "x-llm-priority", kind: "400 bad x-llm-priority" },
};

export function classify(r: SoakRecord, kills: readonly Kill[]): Classified {
  const err = r.error;
  const expected = EXPECTED[r.kind];
  if (expected) {
    const right = err?.kind === "status" && err.status === expected.status &&
      (expected.code === undefined || err.code === expected.code) && (expected.param === undefined || err.param === expected.param);
    return right ? { outcome: "expected", kind: expected.kind } : { outcome: "unexpected", kind: `${r.kind} answered ${describe(r)}` };
  }
  if (!err) return { outcome: "ok", kind: "ok" };
  if (err.kind === "status" && err.status === 429 && err.code === "pool_saturated" && err.retryAfterS != null) {
    return { outcome: "refused", kind: "429 pool_saturated" };
  }
  if (err.kind === "broken" && r.servedBy !== null && r.endMs !== undefined) {
    const end = r.endMs;
    const pod = r.servedBy;
    if (kills.some((k) => k.pod === pod && r.sentMs <= k.atMs && k.atMs <= end && end <= k.atMs + INJECTED_WINDOW_MS)) {
      return { outcome: "injected", kind: `${r.stream ? "stream" : "answer"} cut by a killed pod` };
    }
  }
  return { outcome: "unexpected", kind: describe(r) };
}

function describe(r: SoakRecord): string {
  const err = r.error;
  if (!err) return "200";
  switch (err.kind) {
    case "status":
      return `${err.status}${err.code ? ` ${err.code}` : ""}`;
    case "broken":
      return `${r.stream ? "stream" : "answer"} cut (from ${r.servedBy ?? "an unknown pod"}), no kill of it just before`;
    case "no_response":
      return "no response (connection failed)";
    case "timeout":
      return "timeout";
  }
}
