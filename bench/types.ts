// Result types shared by the simulator, the live mode and the reports. A
// mode produces one RequestRecord per request and summarises them with
// bench/stats.ts, so sim and live results have the same shape.

export type Mode = "sim" | "live";

/** Flow-control class of a request (docs/traffic.md), from most to least protected. */
export type Priority = "critical" | "standard" | "sheddable";
export const PRIORITIES: readonly Priority[] = ["critical", "standard", "sheddable"];

/** The error of a request still unfinished at the drain deadline. */
export const TIMEOUT = "timeout";

/** A gateway's refusal for saturation (429, with an OpenAI error code after it in live mode). */
export const isRefusal = (error: string | undefined): boolean => error !== undefined && /^429\b/.test(error);

/**
 * One client request, times relative to the arrival at the gateway of the
 * attempt that was served. A client retries a 429 once, after its
 * Retry-After: `error`, the latencies and the pod are then the retry's, and
 * the first attempt's refusal is kept in `refusedRetryAfterS`.
 */
export interface RequestRecord {
  /** The first attempt's arrival. */
  arrivalMs: number;
  /** The class the client sent. */
  priority: Priority;
  /** Set when the first attempt was refused (429): its Retry-After in seconds, null if it had none (no retry then). */
  refusedRetryAfterS?: number | null;
  /** When the retry of a refused request arrived (same clock as arrivalMs); its TTFT and E2E count from here. */
  retryArrivalMs?: number;
  /** Index of the pod it went to; -1 if the gateway answered itself. */
  pod: number;
  /** Why it failed (e.g. "503", "400 context_length_exceeded", TIMEOUT); undefined on success. */
  error: string | undefined;
  /**
   * For a TIMEOUT, both are censored at the drain deadline (deadline - arrival),
   * TTFT only if no token came, so that a dropped request still counts as slow.
   */
  ttftMs?: number;
  e2eMs?: number;
  promptTokens: number;
  /** Prompt tokens served from the pod's prefix cache. */
  cachedTokens: number;
  outputTokens: number;
}

/** Engine counters summed over a fleet's pods. */
export interface EngineTotals {
  adapterLoads: number;
  preemptions: number;
}

/** Milliseconds. */
export interface LatencySummary {
  p50: number;
  p95: number;
  p99: number;
  mean: number;
  max: number;
}

export interface TimelinePoint {
  /** Start of the arrival window, seconds. */
  t: number;
  /** Requests that arrived in the window and completed or timed out. */
  n: number;
  p50: number;
  p95: number;
}

export interface PolicyResult {
  policy: string;
  description: string;
  /** requests = completed + timeouts + errors. */
  requests: number;
  completed: number;
  /** Unfinished at the drain deadline; counted in the latency figures, censored there. */
  timeouts: number;
  /** Answered with an error (by the gateway or a pod), or failed in the client; not in the latency figures. */
  errors: number;
  errorsByReason: Record<string, number>;
  /** Over completed and timed-out requests; null when there are none. */
  ttftMs: LatencySummary | null;
  e2eMs: LatencySummary | null;
  /** Completed requests and their output tokens over the makespan (first arrival to last completion, or the drain deadline if any timed out). */
  throughput: { requestsPerS: number; outputTokensPerS: number };
  /** Requests sent to each pod, by pod name. */
  perPod: Record<string, number>;
  /** Each pod's fraction of the requests sent to a pod, by pod name. */
  podShare: Record<string, number>;
  /** Cached prompt tokens / prompt tokens over completed requests. */
  prefixHitRate: number;
  /**
   * Recompute preemptions and LoRA adapter loads summed over the engines, and
   * the loads per 1000 requests; null where the engines' counters cannot be
   * read (live mode).
   */
  preemptions: number | null;
  adapterLoads: number | null;
  adapterLoadsPer1k: number | null;
  /** [TTFT ms, fraction of completed and timed-out requests at or below it], ascending. */
  ttftCdf: Array<[number, number]>;
  /** TTFT by arrival time (a retried request's by its retry's). */
  ttftTimeline: TimelinePoint[];
  /** Refusals, retries and classes, and TTFT through a load step (bench/admission.ts). */
  admission: AdmissionSummary;
}

export interface ScenarioResult {
  scenario: string;
  description: string;
  mode: Mode;
  seed: number;
  durationS: number;
  offered: { requests: number; ratePerS: number; meanPromptTokens: number; meanOutputTokens: number };
  fleet: Array<{ pod: string; model: string; speed: number }>;
  policies: PolicyResult[];
}

export interface RunOptions {
  /** Overrides the scenario's seed. */
  seed?: number;
  /** Overrides the scenario's duration (seconds of arrivals). */
  durationS?: number;
  /** Policy names to run (default: all). */
  policies?: string[];
  /** Progress of one policy's run, fraction 0..1 of the arrival window. */
  onProgress?: (policy: string, fraction: number) => void;
}

/** A scenario's load step: base load first, then a higher rate for a while (times in s). */
export interface LoadStep {
  baseEndS: number;
  stepStartS: number;
  stepEndS: number;
}

export interface ClassCounts {
  requests: number;
  /** First attempts answered 429. */
  refused: number;
  /** Refused requests sent again after their Retry-After. */
  retried: number;
  /** Retries admitted and completed. */
  retriedCompleted: number;
  /** Refused for good: on the retry too, or with no Retry-After to obey. */
  finalRefused: number;
}

export interface StepSummary extends LoadStep {
  /** Admitted p95 TTFT of the requests that arrived at base load (before the step). */
  baseP95Ms: number | null;
  /** The highest admitted p95 of a window that starts within the step, and its ratio to the base's. */
  stepPeakP95Ms: number | null;
  stepPeakRatio: number | null;
  /**
   * How long after the step's end the first window whose p95 is back within
   * RECOVERED_WITHIN of the base's starts (0: the first window after the
   * step already is); null if none is.
   */
  recoveryS: number | null;
  /** 429s (every attempt) before the step, during it, and after its end. */
  refusalsBefore: number;
  refusalsDuring: number;
  refusalsAfter: number;
  /** Of those after the step, the first attempts' (the rest are retries of earlier refusals). */
  refusalsAfterFirstAttempts: number;
}

export interface AdmissionSummary {
  byClass: Record<Priority, ClassCounts>;
  total: ClassCounts;
  /** retriedCompleted / retried; null without retries. */
  retrySuccess: number | null;
  /** Critical refusals (any attempt) in a 1-s window (of the run's clock) in which some Sheddable attempt was admitted. */
  criticalWhileSheddable: number;
  /** The Retry-After values given to first attempts, in seconds. */
  retryAfterS: { min: number; p50: number; max: number } | null;
  /** Retried requests that completed: TTFT from the retry, and from the first attempt (what their user waited). */
  retriedTtftMs: { fromRetry: LatencySummary; fromFirstAttempt: LatencySummary } | null;
  /** Admitted p95 TTFT per WINDOW_S window of the admitted attempt's arrival. */
  windows: Array<{ t: number; n: number; p95: number }>;
  /** 429s per second (every attempt), the seconds that had any. */
  refusalsPerS: Array<{ t: number; n: number }>;
  step: StepSummary | null;
}
