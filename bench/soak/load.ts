// The soak's open-loop load: each planned request leaves at its time whether
// or not earlier ones have finished, and is recorded as it goes.
import { setMaxListeners } from "node:events";
import type OpenAI from "openai";
import { send, type RequestRecord } from "./client.js";
import { planTraffic } from "./traffic.js";

/** After the last arrival, requests still running this long are abandoned (timeouts). */
const DRAIN_LIMIT_MS = 30_000;

export class Load {
  readonly records: RequestRecord[] = [];
  private readonly running = new Set<RequestRecord>();

  constructor(
    private readonly client: OpenAI,
    private readonly clock: () => number,
  ) {}

  get runningCount(): number {
    return this.running.size;
  }

  /** Streams `pod` is sending: their 200 has arrived and their end has not. */
  streamsUnderway(pod: string): number {
    let n = 0;
    for (const r of this.running) if (r.stream && r.servedBy === pod && r.headersMs !== undefined) n++;
    return n;
  }

  /** Sends every request planned before `durationMs` (until `stopped`), then waits for them to end. */
  async run(seed: number, ratePerS: number, durationMs: number, stopped: () => boolean): Promise<void> {
    const pending: Array<Promise<void>> = [];
    const drain = new AbortController();
    // Every request in flight listens on this one signal.
    setMaxListeners(Infinity, drain.signal);
    for (const planned of planTraffic(seed, ratePerS)) {
      if (planned.atMs >= durationMs || stopped()) break;
      const wait = planned.atMs - this.clock();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      const record: RequestRecord = {
        index: planned.index, kind: planned.kind, model: planned.model, stream: planned.stream, priority: planned.priority,
        sentMs: this.clock(), servedBy: null, outputTokens: 0,
      };
      this.records.push(record);
      this.running.add(record);
      pending.push(send(this.client, planned, record, this.clock, drain.signal).finally(() => this.running.delete(record)));
    }
    const giveUp = setTimeout(() => drain.abort(), DRAIN_LIMIT_MS);
    await Promise.all(pending);
    clearTimeout(giveUp);
  }
}
