// A parity scenario is a list of events applied in order to two sides: the
// Envoy filter (build/filter.wasm on the proxy-wasm emulator) and the native
// build (build/native.wasm). Every request yields a decision on each side;
// the two lists must be equal. New kinds of events (e.g. in-flight
// accounting) are added here and handled by both sides.
import type { SnapshotMsg } from "../../host/proto.js";

export type InferencePath = "/v1/chat/completions" | "/v1/completions" | "/v1/embeddings";

export type ParityEvent =
  /** The aggregator pushes a snapshot (raw bytes may be garbage: both sides must then keep the old one). */
  | { type: "snapshot"; snapshot: SnapshotMsg | Uint8Array }
  /** The aggregator's heartbeat: it is alive, with nothing new. */
  | { type: "heartbeat" }
  | { type: "advance"; ms: number }
  /** The filter's refresh timer fires. */
  | { type: "tick" }
  | {
      type: "request";
      /** Names the stream for a later "done". */
      id: string;
      path: InferencePath;
      body: string | Uint8Array;
      /** Data frames the body arrives in (filter side). */
      chunks?: number;
      /** The body ends with trailers instead of end-of-stream on its last frame (filter side). */
      trailers?: boolean;
      /** The Envoy worker whose connection carries it (default 0). */
      worker?: number;
      /** The x-llm-priority header, if sent. */
      priority?: string;
    }
  /**
   * The stream `id` ends. `status` absent: the client left before any answer.
   * `upstream`: the pod that answered, if not the one the filter chose first.
   * `broken`: an answered stream ended without its terminal event.
   */
  | { type: "done"; id: string; status?: number; upstream?: string; broken?: boolean };

/** What a side decided for one request. */
export type Decision =
  /**
   * `destination`: primary then fallbacks; null when the view was too old to
   * rank (Envoy's balancer picks in the pool). `served`: the model the pod is
   * asked for (a canary split's target).
   */
  | { routed: true; pool: string; destination: string[] | null; served: string }
  /** Answered by the gateway itself: the status, the parsed OpenAI error body, and a 429's Retry-After. */
  | { routed: false; status: number; body: unknown; retryAfter?: string }
  /** Held in a hold queue: a later event (a tick) releases or refuses it. */
  | { held: true };

export interface Side {
  /** Applies one event; a request returns its decision. */
  apply(event: ParityEvent): Decision | undefined;
  /** The held requests this event released or refused, by request id. */
  released(): Map<string, Decision>;
}

export interface DecisionPair {
  event: number;
  request: string;
  filter: Decision;
  native: Decision;
}

/** Every decision, requests' at their event and held requests' at the event that released them (in id order). */
export function runBoth(events: readonly ParityEvent[], filter: Side, native: Side): DecisionPair[] {
  const out: DecisionPair[] = [];
  events.forEach((event, i) => {
    const f = filter.apply(event);
    const n = native.apply(event);
    if (event.type === "request") {
      if (f === undefined || n === undefined) throw new Error(`event ${i}: a side gave no decision for request ${event.id}`);
      out.push({ event: i, request: event.id, filter: f, native: n });
    }
    const fr = filter.released();
    const nr = native.released();
    const none: Decision = { held: true };
    for (const id of [...new Set([...fr.keys(), ...nr.keys()])].sort()) {
      out.push({ event: i, request: id, filter: fr.get(id) ?? none, native: nr.get(id) ?? none });
    }
  });
  return out;
}

export const KIND_OF_PATH = {
  "/v1/chat/completions": "chat",
  "/v1/completions": "completions",
  "/v1/embeddings": "other",
} as const;
