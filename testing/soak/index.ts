// `npm run soak -- --minutes N`: mixed traffic through the real stack while
// pods fail, join and leave, with memory sampled throughout. Every request
// is classified (classify.ts); the run fails on any unexpected outcome, on an
// event it could not carry out, and (runs of 10 minutes or more) on memory
// that does not level off (trend.ts).
import { mkdirSync } from "node:fs";
import { classify, OUTCOMES, type Classified, type Kill, type Outcome } from "./classify.js";
import { EventRunner, type SoakEvent } from "./events.js";
import { Load, type SoakRecord } from "./load.js";
import { MemorySampler, type MemorySample } from "./memory.js";
import { DEFAULT_CYCLE, planEvents, type Cycle } from "./schedule.js";
import { startSoakStack } from "./stack.js";
import { JUDGED_FROM_MS, SERIES, SERIES_TITLES, trendOf, type Trend } from "./trend.js";

export interface SoakOptions {
  durationMs: number;
  /** Request arrivals per second (Poisson). */
  ratePerS?: number;
  seed?: number;
  cycle?: Cycle;
  sampleEveryMs?: number;
  outDir: string;
  /** A status line every ~10 s, and a line per event. */
  progress?: (line: string) => void;
}

export interface SoakSettings {
  durationMs: number;
  ratePerS: number;
  seed: number;
  cycle: Cycle;
  sampleEveryMs: number;
  /** How a join or leave reaches the running gateway. */
  membershipBy: string;
}

export interface ClassifiedRecord extends SoakRecord {
  outcome: Outcome;
  outcomeKind: string;
}

export interface SoakResult {
  settings: SoakSettings;
  startedAt: string;
  elapsedMs: number;
  requests: number;
  byOutcome: Record<Outcome, number>;
  /** Every outcome but ok, by kind: "404 model_not_found (...)": n. */
  byKind: Record<Outcome, Record<string, number>>;
  /** Every request that was not ok, in full. */
  notOk: ClassifiedRecord[];
  /** Requests each pod answered (x-served-by), by outcome. */
  byPod: Record<string, Partial<Record<Outcome, number>>>;
  /** Outcomes of the requests sent in each window, for the chart. */
  timeline: Array<{ tS: number } & Record<Outcome, number>>;
  timelineWindowS: number;
  events: SoakEvent[];
  kills: Kill[];
  /** A killed pod's first whole answer after it came back, since its restore. */
  recoveries: Array<{ pod: string; restoredAtMs: number; servedAgainAfterMs: number | null }>;
  samples: MemorySample[];
  trends: Trend[];
  /** What went wrong with the run itself (an event not carried out, a process that died). */
  failures: string[];
}

const DEFAULT_RATE = 30;
const SAMPLE_EVERY_MS = 5_000;
const PROGRESS_EVERY_MS = 10_000;
const TIMELINE_WINDOW_MS = 10_000;
export const MEMBERSHIP_BY = "the config file edited; the running aggregator reloads it, nothing restarts";

export async function runSoak(opts: SoakOptions): Promise<SoakResult> {
  const settings: SoakSettings = {
    durationMs: opts.durationMs,
    ratePerS: opts.ratePerS ?? DEFAULT_RATE,
    seed: opts.seed ?? 1,
    cycle: opts.cycle ?? DEFAULT_CYCLE,
    sampleEveryMs: opts.sampleEveryMs ?? SAMPLE_EVERY_MS,
    membershipBy: MEMBERSHIP_BY,
  };
  const progress = opts.progress ?? (() => {});
  mkdirSync(opts.outDir, { recursive: true });
  const startedAt = new Date().toISOString();
  const failures: string[] = [];

  progress(`starting the stack (logs in ${opts.outDir})`);
  const stack = await startSoakStack(opts.outDir);
  try {
    const t0 = performance.now();
    const clock = () => performance.now() - t0;
    // Anything that breaks the run itself ends it early and fails it.
    let stopped = false;
    const fail = (reason: string) => {
      if (stopped) return;
      failures.push(reason);
      stopped = true;
    };
    void stack.envoy.exited.then(() => fail("Envoy exited during the run (its log: envoy.log)"));
    void stack.aggregator.exited.then(() => fail("the aggregator exited during the run (its log: aggregator.log)"));

    const sampler = new MemorySampler(stack.envoy, () => stack.aggregator.pid, clock, settings.sampleEveryMs);
    await sampler.sample();
    sampler.start();

    const load = new Load(stack.gatewayUrl, clock);
    const runner = new EventRunner(stack, clock, (pod) => load.streamsUnderway(pod));
    const eventsDone = runner.run(planEvents(settings.cycle, settings.durationMs), () => stopped)
      .catch((err: Error) => fail(`event failed: ${err.message}`));

    let eventsReported = 0;
    const report = (tMs: number) => {
      for (; eventsReported < runner.events.length; eventsReported++) {
        const e = runner.events[eventsReported];
        progress(`  ${e.kind} ${e.pod} at ${(e.atMs / 1000).toFixed(1)} s, done in ${Math.round(e.doneMs - e.atMs)} ms`);
      }
      progress(statusLine(tMs, settings.durationMs, load, runner.kills, sampler.latest()));
    };
    const status = setInterval(() => report(clock()), PROGRESS_EVERY_MS);
    try {
      await load.run(settings.seed, settings.ratePerS, settings.durationMs, () => stopped);
      await eventsDone;
    } finally {
      stopped = true;
      clearInterval(status);
    }
    await sampler.stop();
    const elapsedMs = clock();
    report(elapsedMs);
    return summarise(settings, startedAt, elapsedMs, load.records, runner, sampler.samples, failures);
  } finally {
    await stack.close();
  }
}

function summarise(
  settings: SoakSettings, startedAt: string, elapsedMs: number, records: SoakRecord[], runner: EventRunner,
  samples: MemorySample[], failures: string[],
): SoakResult {
  const byOutcome = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Outcome, number>;
  const byKind = Object.fromEntries(OUTCOMES.map((o) => [o, {}])) as Record<Outcome, Record<string, number>>;
  const notOk: ClassifiedRecord[] = [];
  const byPod: SoakResult["byPod"] = {};
  const windows = new Map<number, Record<Outcome, number>>();
  const classified = records.map((r) => [r, classify(r, runner.kills)] as const);
  for (const [r, c] of classified) {
    byOutcome[c.outcome]++;
    byKind[c.outcome][c.kind] = (byKind[c.outcome][c.kind] ?? 0) + 1;
    if (c.outcome !== "ok") notOk.push({ ...r, outcome: c.outcome, outcomeKind: c.kind });
    if (r.servedBy !== null) {
      const pod = (byPod[r.servedBy] ??= {});
      pod[c.outcome] = (pod[c.outcome] ?? 0) + 1;
    }
    const w = Math.floor(r.sentMs / TIMELINE_WINDOW_MS);
    const counts = windows.get(w) ?? (Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Outcome, number>);
    counts[c.outcome]++;
    windows.set(w, counts);
  }
  delete byKind.ok.ok;
  return {
    settings,
    startedAt,
    elapsedMs,
    requests: records.length,
    byOutcome,
    byKind,
    notOk,
    byPod,
    timelineWindowS: TIMELINE_WINDOW_MS / 1000,
    timeline: [...windows.entries()].sort(([a], [b]) => a - b).map(([w, counts]) => ({ tS: (w * TIMELINE_WINDOW_MS) / 1000, ...counts })),
    events: runner.events,
    kills: runner.kills,
    recoveries: recoveries(runner.events, classified),
    samples,
    trends: SERIES.map((s) => trendOf(samples, s, settings.durationMs)),
    failures,
  };
}

function recoveries(events: SoakEvent[], classified: ReadonlyArray<readonly [SoakRecord, Classified]>) {
  return events.filter((e) => e.kind === "restore").map((e) => {
    const served = classified
      .filter(([r, c]) => c.outcome === "ok" && r.servedBy === e.pod && r.sentMs >= e.doneMs)
      .map(([r]) => r.endMs!);
    return { pod: e.pod, restoredAtMs: e.doneMs, servedAgainAfterMs: served.length ? Math.min(...served) - e.doneMs : null };
  });
}

/** Why the run fails, one line per reason; empty when it passes. */
export function verdict(result: SoakResult): string[] {
  const reasons = [...result.failures];
  if (result.byOutcome.unexpected > 0) {
    const kinds = Object.entries(result.byKind.unexpected).map(([k, n]) => `${n} × ${k}`).join("; ");
    reasons.push(`${result.byOutcome.unexpected} unexpected errors: ${kinds}`);
  }
  if (result.settings.durationMs >= JUDGED_FROM_MS) {
    for (const t of result.trends) {
      if (t.levelsOff === false) {
        reasons.push(`${SERIES_TITLES[t.series]} does not level off: its second-half peak is ` +
          `${((t.secondHalfPeakBytes! - t.firstHalfPeakBytes!) / 1024).toFixed(0)} KiB above its first half's (at most ${(t.allowedRiseBytes! / 1024).toFixed(0)} KiB)`);
      }
    }
  }
  return reasons;
}

const mb = (bytes: number | null | undefined) => (bytes == null ? "-" : `${(bytes / 2 ** 20).toFixed(1)} MB`);

function statusLine(tMs: number, durationMs: number, load: Load, kills: Kill[], m: MemorySample | undefined): string {
  const counts = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Outcome, number>;
  for (const r of load.records) if (r.endMs !== undefined) counts[classify(r, kills).outcome]++;
  const clockText = (ms: number) => `${Math.floor(ms / 60_000)}:${String(Math.floor((ms % 60_000) / 1000)).padStart(2, "0")}`;
  return `[soak ${clockText(tMs)}/${clockText(durationMs)}] ${load.records.length} sent, ${load.runningCount} running, ` +
    OUTCOMES.map((o) => `${o} ${counts[o]}`).join(", ") +
    ` | envoy ${mb(m?.envoyRssBytes)}, aggregator ${mb(m?.aggregatorRssBytes)}, wasm ${mb(m?.wasmBytes)}`;
}
