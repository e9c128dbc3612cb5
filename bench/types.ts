// The request record every mode keeps (the simulator, the live mode, the
// soak, the failover bench), and the result types the reports read: sim and
// live runs summarise their records alike (bench/stats.ts).
import type { AdmissionSummary } from "./admission.js";

export type Mode = "sim" | "live";

/** Flow-control class of a request (docs/traffic.md), from most to least protected. */
export type Priority = "critical" | "standard" | "sheddable";
export const PRIORITIES: readonly Priority[] = ["critical", "standard", "sheddable"];

/**
 * - `status`: an HTTP status other than 200, before any response byte (the
 *   gateway's own answer, or a pod's);
 * - `no_response`: the connection failed before a status line;
 * - `broken`: a 200 whose body was cut or came back short (a stream broken mid-way);
 * - `timeout`: still running when the load stopped waiting (the drain deadline).
 */
export type ErrorKind = "status" | "no_response" | "broken" | "timeout";

export interface RequestError {
  kind: ErrorKind;
  status?: number;
  code?: string;
  param?: string;
  /** A status answer's Retry-After in seconds (the delay form); null when it had none or another form. */
  retryAfterS?: number | null;
  message: string;
}

/** What a plan says of a request: when it arrives, ms since the start of the load. */
export interface Planned {
  atMs: number;
}

/** What happened to one request; times in ms on the load's clock (virtual time in the simulator). */
export interface Outcome {
  /** When the attempt that was served (or refused for good) reached the gateway. */
  sentMs: number;
  /** When a 200's headers arrived. */
  headersMs?: number;
  /** When the first token (streamed chunk, or whole answer) arrived. */
  firstTokenMs?: number;
  /** Done, failed, or given up at the drain deadline. */
  endMs?: number;
  /** The pod that answered (x-served-by; the simulator's pod name); null when the gateway answered itself. */
  servedBy: string | null;
  promptTokens: number;
  /** Prompt tokens served from the pod's prefix cache. */
  cachedTokens: number;
  outputTokens: number;
  error?: RequestError;
  /**
   * Set when the first attempt was refused (429): its Retry-After (null
   * when it had none) and when each retry reached the gateway (on the plan's
   * clock), as the OpenAI SDKs retry (bench/sdk-retry.ts). Every attempt but
   * the last was refused; the record's outcome is the last's.
   */
  firstRefusal?: { retryAfterS: number | null; retryArrivalsMs: number[] };
}

export type RequestRecord<P extends Planned = Planned> = P & Outcome;

/** A simulated or live-mode request, with the class its client sent. */
export type RunRecord = RequestRecord<Planned & { priority: Priority }>;

export const isTimeout = (r: Outcome): boolean => r.error?.kind === "timeout";

/** A gateway's refusal for saturation (429). */
export const isRefusal = (e: RequestError | undefined): boolean => e?.kind === "status" && e.status === 429;

/**
 * Whether a record's latencies count: completed requests, and timed-out
 * ones (censored at the deadline), so a policy cannot look faster by
 * dropping requests. Error answers have no latency to speak of.
 */
export const isMeasured = (r: Outcome): boolean => r.error === undefined || r.error.kind === "timeout";

/** Time to first token of a measured record, from its served attempt; a timeout with no token is censored at its end. */
export const ttftOf = (r: Outcome): number => (r.firstTokenMs ?? r.endMs!) - r.sentMs;

export const e2eOf = (r: Outcome): number => r.endMs! - r.sentMs;

/** When the attempt that was served (or refused for good) arrived, on the plan's clock. */
export const lastArrivalMs = (r: RequestRecord): number => r.firstRefusal?.retryArrivalsMs.at(-1) ?? r.atMs;

/**
 * What the request's user waited for its first token, from the request's
 * first arrival (a Retry-After wait included). A request that failed
 * (refused for good, timed out, or answered with an error) never got what
 * it asked for: it counts as waiting until the run's deadline.
 */
export function ttftFromArrival(r: RequestRecord, deadlineMs: number): number {
  return r.error === undefined ? lastArrivalMs(r) - r.atMs + ttftOf(r) : deadlineMs - r.atMs;
}

export function e2eFromArrival(r: RequestRecord, deadlineMs: number): number {
  return r.error === undefined ? lastArrivalMs(r) - r.atMs + e2eOf(r) : deadlineMs - r.atMs;
}

/** The error as results count it: "429", "400 context_length_exceeded", "timeout", "client <why>". */
export function errorReason(e: RequestError): string {
  switch (e.kind) {
    case "status":
      return e.code ? `${e.status} ${e.code}` : String(e.status);
    case "timeout":
      return "timeout";
    default:
      return `client ${e.message}`;
  }
}

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
  /** The window of first arrival: its start in s, and its requests. */
  t: number;
  n: number;
  p50: number;
  p95: number;
}

export interface PolicyResult {
  policy: string;
  description: string;
  /** Every request offered: completed + timeouts + errors. */
  requests: number;
  completed: number;
  completedShare: number;
  /** Of the requests, those whose first attempt was refused (429). */
  firstRefusedShare: number;
  /** Unfinished at the drain deadline. */
  timeouts: number;
  /** Answered with an error (by the gateway or a pod, a final refusal included), or failed in the client. */
  errors: number;
  errorsByReason: Record<string, number>;
  /** Every request from its first arrival (a Retry-After wait included), a failed one at the run's deadline; null without requests. */
  ttftMs: LatencySummary | null;
  e2eMs: LatencySummary | null;
  /** Completed requests and their output tokens over the makespan (first arrival to last completion, or the drain deadline if any timed out). */
  throughput: { requestsPerS: number; outputTokensPerS: number };
  /** Requests sent to each pod, and each pod's share of them, by pod name. */
  perPod: Record<string, number>;
  podShare: Record<string, number>;
  /** Cached prompt tokens / prompt tokens over completed requests. */
  prefixHitRate: number;
  /**
   * The same share by the model servers' own counters (every request, failed
   * ones included): llama.cpp's prompt_tokens_cached_total over it plus
   * prompt_tokens_total. Null where the pods are fakes.
   */
  serverCacheReuse: number | null;
  /** Summed over the engines; null where their counters cannot be read (live mode). */
  preemptions: number | null;
  adapterLoads: number | null;
  adapterLoadsPer1k: number | null;
  /** [TTFT ms, fraction of requests at or below it], ascending, as ttftMs counts them. */
  ttftCdf: Array<[number, number]>;
  /** TTFT by first arrival, as ttftMs counts it. */
  ttftTimeline: TimelinePoint[];
  /** Refusals, retries and classes, and TTFT through a load step (bench/admission.ts). */
  admission: AdmissionSummary;
  /** SLO goodput: the share of the offered requests served with TTFT from first arrival within each SLO_TTFT_MS. */
  ttftSlo: SloShares;
}

/** The TTFT SLOs every table gives the share within, from first arrival (a failure never counts). */
export const SLO_TTFT_MS = [2_000, 5_000, 10_000, 30_000] as const;

/** Shares aligned with SLO_TTFT_MS: of all requests, and of each class that had any. */
export interface SloShares {
  all: number[];
  byClass: Partial<Record<Priority, number[]>>;
}

export interface ScenarioResult {
  scenario: string;
  description: string;
  mode: Mode;
  seed: number;
  durationS: number;
  offered: { requests: number; ratePerS: number; meanPromptTokens: number; meanOutputTokens: number };
  fleet: Array<{ pod: string; model: string; speed: number }>;
  /** The live pods were real model servers. */
  pods?: "llamacpp";
  /** Several gateway replicas behind a front (bench/sim/replicas.ts). */
  replicas?: { count: number; front: "round-robin"; sharing: string };
  policies: PolicyResult[];
}

export const LIVE_FLEETS = ["fake", "llamacpp"] as const;
export type LiveFleetKind = (typeof LIVE_FLEETS)[number];

export interface RunOptions {
  /** Override the scenario's. */
  seed?: number;
  durationS?: number;
  /** Policy names to run (default: all). */
  policies?: string[];
  /** Gateway replicas behind a round-robin front, sharing nothing but the snapshot (sim mode; default 1). */
  replicas?: number;
  /**
   * Set: the replicas share in-flight counts, prefix placements and queue boards through the control plane at this
   * interval (ms), through the built design's code (bench/sim/replica-state.ts).
   */
  shareIntervalMs?: number;
  /** Live mode: ours once per count of Envoys (more than one behind a round-robin front) instead of once. */
  envoys?: number[];
  /** Live mode: the pods are fake servers (default) or real llama.cpp servers. */
  fleet?: LiveFleetKind;
  /** Progress of one policy's run, fraction 0..1 of the arrival window. */
  onProgress?: (policy: string, fraction: number) => void;
}
