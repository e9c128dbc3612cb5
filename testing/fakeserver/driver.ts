/**
 * Runs a pure Engine against wall-clock time. Engine time is milliseconds
 * on the given monotonic clock; a single timer is kept armed for the engine's
 * next event, so an idle pod holds no timer. Requests submitted within the
 * same macrotask join the same step, as near-simultaneous arrivals would.
 */
import type { Engine, EngineRequestInput, RequestStats } from "../engine/index.js";

export interface RequestListener {
  /** Output token `index` (0 = first token) was produced. */
  onToken?(index: number): void;
  onFinish?(stats: RequestStats): void;
}

export class RealtimeDriver {
  private timer: NodeJS.Timeout | undefined;
  private timerAt = Infinity;
  private readonly listeners = new Map<string, RequestListener>();
  private closed = false;

  constructor(
    readonly engine: Engine,
    /** Monotonic milliseconds; must not run behind the engine's start time. */
    readonly clock: () => number,
  ) {}

  /** Queue a request now. Throws RequestRejectedError like Engine.submit; returns its prompt tokens. */
  submit(input: EngineRequestInput, listener?: RequestListener): number {
    if (this.closed) throw new Error("driver is closed");
    const promptTokens = this.engine.submit(input, this.clock());
    if (listener) this.listeners.set(input.id, listener);
    this.arm();
    return promptTokens;
  }

  /** Cancel a request; its listener is dropped without a finish callback. */
  abort(id: string): void {
    if (this.closed) return;
    this.listeners.delete(id);
    this.engine.abort(id, this.clock());
    this.tick();
  }

  /** Stop the timer; the engine keeps its state for inspection. */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.listeners.clear();
  }

  private readonly tick = (): void => {
    this.timer = undefined;
    this.timerAt = Infinity;
    if (this.closed) return;
    for (const ev of this.engine.advanceTo(this.clock())) {
      const listener = this.listeners.get(ev.id);
      if (!listener) continue;
      if (ev.type === "token") listener.onToken?.(ev.index);
      else if (ev.type === "finished") {
        this.listeners.delete(ev.id);
        listener.onFinish?.(ev.stats);
      }
    }
    this.arm();
  };

  private arm(): void {
    const at = this.engine.nextEventTime();
    if (!Number.isFinite(at) || (this.timer && this.timerAt <= at)) return;
    clearTimeout(this.timer);
    this.timerAt = at;
    // Timers may fire a little early or late; tick() re-arms from whatever time it sees.
    this.timer = setTimeout(this.tick, Math.max(0, at - this.clock()));
  }
}
