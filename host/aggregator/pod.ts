// One discovered pod: its connection, its last good metrics, and the entry
// it has in the snapshot. A scrape fetches, parses and normalises its page
// and books the result; the entry is rebuilt only at the cycle's end, and
// only when a scrape landed or the pod's freshness ran out.
import type { Engine } from "../config.js";
import type { Target } from "../discovery/source.js";
import type { EndpointMsg } from "../proto.js";
import { CapacityLearner } from "./capacity.js";
import { normalise, wantedMetrics } from "./normalise.js";
import { ScrapeConnection, ScrapeError } from "./scrape-connection.js";
import { parseMetrics } from "./scrape.js";
import { endpointMsg, isFresh, recordScrape, sameEndpoint, type EndpointState } from "./snapshot.js";

export interface ScrapeOutcome {
  /** Wall time of the scrape. */
  seconds: number;
  /** Null when it was good; else why not ("parse" when the page was read but its gauges were not usable). */
  error: { kind: string; message: string } | null;
}

export class Pod implements EndpointState {
  readonly address: string;
  metrics: EndpointState["metrics"] = null;
  lastGoodMs: number | null = null;
  readonly capacity = new CapacityLearner();
  scrapes = 0;
  scrapeErrors = 0;
  /** Last scrape error's message, so only changes get logged (not 20 lines/s). */
  lastError: string | null = null;
  inFlight = false;
  /** Date.now() of the first scrape (or target change) the entry does not reflect yet; null when none. */
  changedSinceMs: number | null = null;
  /** The pod's entry in the current snapshot (or the next one, before the first). */
  entry: EndpointMsg;
  private readonly connection: ScrapeConnection;
  private readonly wanted: ReadonlySet<string>;

  constructor(
    public target: Target,
    private readonly engine: Engine,
    /** Its pool's; a reload may change it (setBatchSlots). */
    private batchSlots: number,
  ) {
    this.address = target.address;
    this.connection = new ScrapeConnection(target);
    this.wanted = wantedMetrics(engine);
    this.entry = this.buildEntry(false);
  }

  /** One scrape: fetch, parse, normalise, book. Never throws. */
  async scrape(timeoutMs: number): Promise<ScrapeOutcome> {
    const started = performance.now();
    this.inFlight = true;
    this.scrapes++;
    let error: ScrapeOutcome["error"] = null;
    try {
      const metrics = await this.connection.get(timeoutMs, (body) => {
        try {
          return normalise(this.engine, parseMetrics(body, this.wanted));
        } catch (err) {
          throw new ScrapeError("parse", (err as Error).message);
        }
      });
      const now = Date.now();
      recordScrape(this, metrics, now);
      this.changedSinceMs ??= now;
    } catch (err) {
      this.scrapeErrors++;
      error = { kind: err instanceof ScrapeError ? err.kind : "network", message: (err as Error).message };
    } finally {
      this.inFlight = false;
    }
    return { seconds: (performance.now() - started) / 1000, error };
  }

  isFresh(now: number, staleAfterMs: number): boolean {
    return isFresh(this, now, staleAfterMs);
  }

  /** A reload changed the pool's batchSlots: the entry follows at the cycle's end. */
  setBatchSlots(batchSlots: number, now: number): void {
    if (batchSlots === this.batchSlots) return;
    this.batchSlots = batchSlots;
    this.changedSinceMs ??= now;
  }

  /** A new target for the same address (its capacity hint may have changed). */
  retarget(target: Target, now: number): void {
    this.target = target;
    this.changedSinceMs ??= now;
  }

  /**
   * Brings the entry up to date at the cycle's end. Returns when the change
   * it now carries happened (the scrape's landing; `now` when only its
   * freshness ran out), or null when it did not change. Costs a comparison
   * only when a scrape landed or freshness moved.
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

  close(): void {
    this.connection.close();
  }

  private buildEntry(fresh: boolean): EndpointMsg {
    return endpointMsg(this.address, this.metrics, this.target.capacity ?? this.capacity.value, fresh, this.batchSlots);
  }
}
