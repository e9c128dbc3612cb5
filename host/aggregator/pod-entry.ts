// What the aggregator knows of one pod and the entry it has in the snapshot:
// its last good metrics, its learned speed, and when something changed that
// the entry does not show yet. The aggregator's Pod adds a scrape
// connection; the simulator books its simulated scrapes on these directly,
// so both build snapshots with the same SnapshotBuilder.
import type { EndpointMsg } from "../proto.js";
import { CapacityLearner } from "./capacity.js";
import type { EndpointMetrics } from "./normalise.js";
import { endpointMsg, isFresh, recordScrape, sameEndpoint, type EndpointState } from "./snapshot.js";

export class PodEntry implements EndpointState {
  metrics: EndpointState["metrics"] = null;
  lastGoodMs: number | null = null;
  readonly capacity = new CapacityLearner();
  /** The time of the first scrape (or setting change) the entry does not reflect yet; null when none. */
  changedSinceMs: number | null = null;
  /** The pod's entry in the current snapshot (or the next one, before the first). */
  entry: EndpointMsg;

  constructor(
    readonly address: string,
    /** The operator's capacity for it, when its pool states them (never mixed with learned ones). */
    private statedCapacity: number | undefined,
    /** Its pool's; a reload may change it (setBatchSlots). */
    private batchSlots: number,
  ) {
    this.entry = this.buildEntry(false);
  }

  /** A good scrape's values, landed at `now`. */
  book(metrics: EndpointMetrics, now: number): void {
    recordScrape(this, metrics, now);
    this.changedSinceMs ??= now;
  }

  isFresh(now: number, staleAfterMs: number): boolean {
    return isFresh(this, now, staleAfterMs);
  }

  /** A reload changed the pool's batchSlots: the entry follows at the next build. */
  setBatchSlots(batchSlots: number, now: number): void {
    if (batchSlots === this.batchSlots) return;
    this.batchSlots = batchSlots;
    this.changedSinceMs ??= now;
  }

  /** Discovery restated the pod's capacity. */
  protected setStatedCapacity(capacity: number | undefined, now: number): void {
    this.statedCapacity = capacity;
    this.changedSinceMs ??= now;
  }

  /**
   * Brings the entry up to date. Returns when the change it now carries
   * happened (the scrape's landing; `now` when only its freshness ran out),
   * or null when it did not change. Costs a comparison only when a scrape
   * landed or freshness moved.
   */
  updateEntry(now: number, staleAfterMs: number): number | null {
    const fresh = this.isFresh(now, staleAfterMs);
    const since = this.changedSinceMs;
    if (since === null && fresh === this.entry.fresh) return null;
    this.changedSinceMs = null;
    const entry = this.buildEntry(fresh);
    if (sameEndpoint(entry, this.entry)) return null;
    this.entry = entry;
    return since ?? now;
  }

  private buildEntry(fresh: boolean): EndpointMsg {
    return endpointMsg(this.address, this.metrics, this.statedCapacity ?? this.capacity.value, fresh, this.batchSlots);
  }
}
