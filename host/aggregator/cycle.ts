// The scrape loop. Every interval one cycle: a scrape of every pod that is
// not still busy with an earlier one, then the cycle's end, once all of them
// have landed (or at the next tick, if some have not: they land into a later
// cycle). The cycle's end is where the snapshot is built and pushed, so that
// happens at most once per cycle however many pods changed; everything per
// cycle is linear in the pods.
//
// The configured interval is the shortest. A fleet whose cycle needs more
// than CORE_SHARE of a core at that pace gets a longer one: the interval
// follows the measured CPU per cycle, and every cycle reports both (telemetry
// cycle(), the aggregator's metrics).
import type { AggregatorTelemetry } from "./telemetry.js";
import type { Pod, ScrapeOutcome } from "./pod.js";
import type { PoolState } from "./pool.js";

/** The scrape loop may take this share of one core; a fleet that needs more gets a longer interval. */
export const CORE_SHARE = 0.5;
/** Weight of the newest cycle in the smoothed cost of a cycle. */
const SMOOTHING = 0.1;
/** The interval moves only when the one needed differs from it by more than this (relative), so it does not flap. */
const HYSTERESIS = 0.25;
/** Intervals move in steps of this much. */
const STEP_MS = 10;

/**
 * The interval for cycles costing `cpuMs` of CPU: at most CORE_SHARE of a
 * core, never below `minMs` (the configured one) nor above `maxMs` (past
 * which pods would go stale between scrapes). Moves only past the
 * hysteresis band, and always back to `minMs` once that is enough.
 */
export function adaptInterval(currentMs: number, cpuMs: number, minMs: number, maxMs: number): number {
  const needed = Math.ceil(cpuMs / CORE_SHARE / STEP_MS) * STEP_MS;
  const target = Math.min(maxMs, Math.max(minMs, needed));
  const far = target > currentMs * (1 + HYSTERESIS) || target < currentMs * (1 - HYSTERESIS);
  return far || target === minMs || target === maxMs ? target : currentMs;
}

export interface ScrapeLoopOptions {
  /** The configured interval: the shortest the loop uses. */
  intervalMs: number;
  timeoutMs: number;
  staleAfterMs: number;
  pools: () => Iterable<PoolState>;
  /** Called once at the end of every cycle. */
  endCycle: () => void;
  telemetry: AggregatorTelemetry;
  log: (line: string) => void;
}

export class ScrapeLoop {
  private timer: NodeJS.Timeout | null = null;
  private cycleId = 0;
  /** The current cycle's scrapes not landed yet; the cycle is open until they have (or the next tick). */
  private pending = 0;
  private open = false;
  private interval: number;
  private readonly maxIntervalMs: number;
  private cpuAtTick = process.cpuUsage();
  private smoothedCpuMs: number | null = null;
  private nextTickMs = 0;
  private stopped = false;

  constructor(private readonly opts: ScrapeLoopOptions) {
    this.interval = opts.intervalMs;
    this.maxIntervalMs = Math.max(opts.intervalMs, Math.floor(opts.staleAfterMs / 2));
  }

  /** One scrape of every pod, awaited: at start, so the first snapshot already carries real state. */
  async firstRound(): Promise<void> {
    const scrapes: Array<Promise<void>> = [];
    for (const pool of this.opts.pools()) for (const pod of pool.pods) if (!pod.inFlight) scrapes.push(this.scrape(pool, pod, 0));
    await Promise.all(scrapes);
  }

  start(): void {
    this.cpuAtTick = process.cpuUsage();
    this.nextTickMs = Date.now() + this.interval;
    this.timer = setTimeout(() => this.tick(), this.interval);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.open = false;
  }

  private tick(): void {
    // A cycle still waiting for slow pods ends now; they land into a later one.
    if (this.open) this.finish();
    this.measure();
    this.cycleId++;
    this.open = true;
    this.pending = 0;
    for (const pool of this.opts.pools()) {
      for (const pod of pool.pods) {
        if (pod.inFlight) continue;
        this.pending++;
        void this.scrape(pool, pod, this.cycleId);
      }
    }
    if (this.pending === 0) this.finish();
    // On the interval's grid, unless the loop has fallen behind it.
    const now = Date.now();
    this.nextTickMs = Math.max(this.nextTickMs + this.interval, now);
    this.timer = setTimeout(() => this.tick(), this.nextTickMs - now);
  }

  private async scrape(pool: PoolState, pod: Pod, cycle: number): Promise<void> {
    const outcome = await pod.scrape(this.opts.timeoutMs);
    this.landed(pool, pod, outcome);
    if (cycle === this.cycleId && this.open && --this.pending === 0) this.finish();
  }

  /** Reports a landed scrape; logs only changes of a pod's error, not every failed scrape. */
  private landed(pool: PoolState, pod: Pod, outcome: ScrapeOutcome): void {
    if (this.stopped || !pool.has(pod)) return;
    const name = pod.target.name;
    this.opts.telemetry.scrape(pool.name, name, outcome.seconds, outcome.error?.kind ?? null);
    const { error } = outcome;
    if (error === null) {
      if (pod.lastError !== null) this.opts.log(`endpoint ${name} scrapes OK again`);
      pod.lastError = null;
      return;
    }
    if (error.message !== pod.lastError) this.opts.log(`endpoint ${name} scrape failed: ${error.message}`);
    pod.lastError = error.message;
    if (!pod.isFresh(Date.now(), this.opts.staleAfterMs)) pool.source.notAnswering?.(pool.name, pod.address);
  }

  private finish(): void {
    this.open = false;
    this.opts.endCycle();
  }

  /** The CPU the process took since the last tick: one cycle's cost. Reported, and the interval follows it. */
  private measure(): void {
    const used = process.cpuUsage(this.cpuAtTick);
    this.cpuAtTick = process.cpuUsage();
    const cpuMs = (used.user + used.system) / 1000;
    this.opts.telemetry.cycle(cpuMs, this.interval);
    this.smoothedCpuMs = this.smoothedCpuMs === null ? cpuMs : this.smoothedCpuMs + SMOOTHING * (cpuMs - this.smoothedCpuMs);
    const next = adaptInterval(this.interval, this.smoothedCpuMs, this.opts.intervalMs, this.maxIntervalMs);
    if (next === this.interval) return;
    const pods = [...this.opts.pools()].reduce((n, p) => n + p.size, 0);
    const why =
      next === this.maxIntervalMs && next > this.opts.intervalMs
        ? `, the longest that keeps pods fresh (staleAfterMs / 2): the scrape loop needs more than ${CORE_SHARE * 100}% of a core`
        : "";
    this.opts.log(`scrape interval ${next} ms (was ${this.interval}): a cycle of ${pods} pods takes ${this.smoothedCpuMs.toFixed(1)} ms of CPU${why}`);
    this.interval = next;
  }
}
