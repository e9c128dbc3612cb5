/**
 * Faults a pod can be switched into at runtime, each the kind of failure a
 * health check cannot see (/metrics and /health keep answering):
 *
 * - `hang`: a completion is read and then gets nothing (no status line, no
 *   byte) until the fault is cleared, when it is served as usual. It never
 *   reaches the engine, so the pod's metrics look idle.
 * - `break-streams`: a completion is served with a 200 and its connection is
 *   destroyed part-way: a stream after its first two events (no `[DONE]`), a
 *   plain answer after its headers (content-length included) and half its body.
 * - `stall-stream`: a stream sends its first event, then nothing more (the
 *   connection stays open) until the fault is cleared, when the held events
 *   follow. Plain answers are unaffected.
 * - `stream-error`: a stream sends its first events, then an error event and
 *   `[DONE]` on a 200, as vLLM does when generation fails mid-way
 *   (vllm/entrypoints/openai/serving_chat.py: `data: {"error": ...}` then
 *   `data: [DONE]`). Plain answers are unaffected.
 * - `overloaded`: a completion is answered at once with a 429, as TGI does
 *   when its concurrency limit is reached (router/src/server.rs maps
 *   `InferError::Overloaded` to 429, "Model is overloaded").
 *
 * The mode in force when a request's body has been read decides what happens
 * to it; switching modes releases whatever the previous one held.
 */
import type { ServerResponse } from "node:http";

export const FAULT_MODES = ["hang", "break-streams", "stall-stream", "stream-error", "overloaded"] as const;
export type FaultMode = (typeof FAULT_MODES)[number];

interface Hold {
  mode: FaultMode;
  release: () => void;
}

export class PodFaults {
  private current: FaultMode | null = null;
  private readonly held = new Map<ServerResponse, Hold>();

  get mode(): FaultMode | null {
    return this.current;
  }

  /** Switch to `mode` (null: no fault); responses held by another mode are released. */
  set(mode: FaultMode | null): void {
    this.current = mode;
    for (const [res, hold] of this.held) {
      if (hold.mode === mode) continue;
      this.held.delete(res);
      hold.release();
    }
  }

  /** Responses currently held back by a hang or a stall. */
  get heldCount(): number {
    return this.held.size;
  }

  /**
   * Calls `release` once `mode` is no longer in force. A response whose
   * connection closes first (the client gave up, or the server stopped) is
   * forgotten, never released.
   */
  hold(res: ServerResponse, mode: FaultMode, release: () => void): void {
    if (res.closed) return;
    this.held.set(res, { mode, release });
    res.once("close", () => this.held.delete(res));
  }
}
