// One discovered pod: its connection, its last good metrics, and the entry
// it has in the snapshot. A scrape fetches, parses and normalises its page
// and books the result; the entry is rebuilt only at the cycle's end, and
// only when a scrape landed or the pod's freshness ran out.
import type { Engine } from "../config.js";
import type { PodTlsConfig } from "../config/edge.js";
import type { Target } from "../discovery/source.js";
import { normalise, wantedMetrics } from "./normalise.js";
import { PodEntry } from "./pod-entry.js";
import { ScrapeConnection, ScrapeError } from "./scrape-connection.js";
import { parseMetrics } from "./scrape.js";

export interface ScrapeOutcome {
  /** Wall time of the scrape. */
  seconds: number;
  /** Null when it was good; else why not ("parse" when the page was read but its gauges were not usable). */
  error: { kind: string; message: string } | null;
}

export class Pod extends PodEntry {
  scrapes = 0;
  scrapeErrors = 0;
  /** Last scrape error's message, so only changes get logged (not 20 lines/s). */
  lastError: string | null = null;
  inFlight = false;
  private readonly connection: ScrapeConnection;
  private readonly wanted: ReadonlySet<string>;

  constructor(
    public target: Target,
    private readonly engine: Engine,
    batchSlots: number,
    tls?: PodTlsConfig,
  ) {
    super(target.address, target.capacity, batchSlots);
    this.connection = new ScrapeConnection(target, tls);
    this.wanted = wantedMetrics(engine);
  }

  /** A reload's pools[].tls, from the next scrape on. */
  setTls(tls: PodTlsConfig | undefined): void {
    this.connection.setTls(tls);
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
      this.book(metrics, Date.now());
    } catch (err) {
      this.scrapeErrors++;
      error = { kind: err instanceof ScrapeError ? err.kind : "network", message: (err as Error).message };
    } finally {
      this.inFlight = false;
    }
    return { seconds: (performance.now() - started) / 1000, error };
  }

  /** A new target for the same address (its capacity hint may have changed). */
  retarget(target: Target, now: number): void {
    this.target = target;
    this.setStatedCapacity(target.capacity, now);
  }

  close(): void {
    this.connection.close();
  }
}
