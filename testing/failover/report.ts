// The failover report: what each phase measured, summarised from the request
// records and Envoy's counters, and its markdown for BENCHMARKS.md.
import { formatMs, markdownTable, tableOf } from "../../bench/report/table.js";
import type { FailoverRecord } from "./load.js";

export const PHASES = [
  "pod-killed", "pod-500", "aggregator-then-pod-killed", "pod-hung", "pod-breaking-responses", "pod-stalling-streams",
] as const;
export type PhaseName = (typeof PHASES)[number];

const TITLES: Record<PhaseName, string> = {
  "pod-killed": "pod killed",
  "pod-500": "pod answering 500, idle metrics",
  "aggregator-then-pod-killed": "aggregator stopped, then pod killed",
  "pod-hung": "pod hung, idle metrics",
  "pod-breaking-responses": "pod cutting responses after their 200",
  "pod-stalling-streams": "pod stalling streams after their first event",
};

/** Envoy counters the report names (deltas over a phase), by a short name. */
export const ENVOY_COUNTERS = {
  retries: "cluster.llm_gateway_pool_llama.upstream_rq_retry",
  retriesSucceeded: "cluster.llm_gateway_pool_llama.upstream_rq_retry_success",
  connectFailures: "cluster.llm_gateway_pool_llama.upstream_cx_connect_fail",
  ejections: "cluster.llm_gateway_pool_llama.outlier_detection.ejections_enforced_total",
  endpointFailures: "wasmcustom.llm_gateway.endpoint_failures_total",
  routed: "wasmcustom.llm_gateway.requests_routed_total",
  routedBlind: "wasmcustom.llm_gateway.requests_routed_blind_total",
} as const;

export interface Span {
  fromMs: number;
  /** null: still going at the end of the phase. */
  toMs: number | null;
}

/** What one phase observed, before summarising; times in ms since the start of its load. */
export interface PhaseRun {
  phase: PhaseName;
  /** The faulty pod. */
  pod: string;
  faultAtMs: number;
  aggregatorClosedAtMs: number | null;
  /** The killed pod's engine right before the kill. */
  engineAtFault: { running: number; waiting: number } | null;
  /** The filter's /health status right before the fault. */
  healthAtFault: string;
  records: FailoverRecord[];
  /** Requests (or refused connections) that reached the faulty pod after the fault. */
  attemptTimesMs: number[];
  /** "pod": counted by the pod's front, exactly; "envoy": Envoy's per-host counters, sampled every 100 ms. */
  attemptsCountedBy: "pod" | "envoy";
  /** Requests the pod failed (by index), as its front saw them; empty when it has none. */
  failedRequests: number[];
  /** When a failure on the faulty pod could first be seen from the gateway (a crash: at once); null if none could. */
  firstFailureAtMs: number | null;
  /** When Envoy's outlier detection had the faulty pod ejected, as the 100 ms samples saw it. */
  envoyEjections: Span[];
  /** When the filter's ledger had a pod of the pool ejected, as its gauge showed in the 100 ms samples. */
  filterEjections: Span[];
  /** Deltas over the load of the pool cluster's counters, the filter's, and the listener's 5xx. */
  envoyCounters: Record<string, number>;
}

export interface Burst {
  fromMs: number;
  toMs: number;
  attempts: number;
}

export interface PhaseReport {
  phase: PhaseName;
  title: string;
  fault: {
    pod: string;
    atS: number;
    aggregatorClosedAtS: number | null;
    engineAtFault: { running: number; waiting: number } | null;
    /** Streams the pod was sending when the fault hit: their 200 and first tokens were already out. */
    streamsUnderway: number;
    healthAtFault: string;
  };
  requests: { sent: number; ok: number; streamed: number; sentAfterFault: number };
  errors: {
    total: number;
    /** An HTTP status other than 200, before any response byte; by "status code". */
    httpStatus: number;
    byStatus: Record<string, number>;
    /** The connection failed before a status line. */
    noResponse: number;
    /** A 200 cut (or short) after it started: a stream broken mid-way. */
    broken: number;
    /**
     * Broken streams another pod was serving. A stream the faulty pod served had its headers out before the
     * fault (the pod is gone after it), however late the loaded client read them.
     */
    brokenElsewhere: number;
    timeouts: number;
    /** When the failed requests ended, relative to the fault. */
    windowMs: { first: number; last: number } | null;
  };
  faultyPod: {
    attemptsAfterFault: number;
    countedBy: "pod" | "envoy";
    /** Relative to the fault. */
    attemptTimesMs: number[];
    /** Attempts grouped by gaps of at least QUIET_MS, relative to the fault. */
    bursts: Burst[];
    /** End of the burst the fault drew (one starting within QUIET_MS of it); 0 if none did. */
    trafficStoppedAfterMs: number;
    /** 200s from the pod whose headers arrived more than GRACE_MS after the fault. */
    servedAfterGrace: number;
    /** When a failure on it could first be seen from the gateway, relative to the fault; null if none could. */
    firstFailureMs: number | null;
    /** Attempts that reached it after that. */
    attemptsAfterFirstFailure: number;
    /** Relative to the fault. */
    envoyEjectionsMs: Span[];
    /** Relative to the fault. */
    filterEjectionsMs: Span[];
    /**
     * When the filter's ledger had the pod ejected, relative to the fault, derived from the client's view (the 500 pod
     * only, null for the others), the longest run of failed requests it learned with no success between (several
     * attempts of one request are one failure to it; a success on the pod, begun before the fault, ends a run), and
     * the attempts that still reached it more than LEDGER_GRACE_MS into one.
     */
    ledger: { ejections: Span[]; longestStreak: number; attemptsWhileEjected: number } | null;
  };
  envoy: Record<keyof typeof ENVOY_COUNTERS, number>;
  envoyCounters: Record<string, number>;
  records: FailoverRecord[];
}

export interface FailoverSettings {
  seed: number;
  ratePerS: number;
  durationS: number;
  faultAtS: number;
  /** Third phase: the aggregator stops this long before the pod dies. */
  aggregatorLeadS: number;
  pods: number;
  outputTokens: [number, number];
  envoyConcurrency: number;
  drainLimitS: number;
  graceMs: number;
  ledgerGraceMs: number;
  quietMs: number;
  /** What the gateway's config and the faulty pod's front hold a response to. */
  deadlines: { firstByteMs: number; streamIdleMs: number };
  gateway: { staleViewMaxAgeMs: number; staleViewPolicy: string; ejectAfterFailures: number; ejectMs: number; staleAfterMs: number; scrapeIntervalMs: number };
}

export interface FailoverReport {
  command: string;
  startedAt: string;
  elapsedS: number;
  smoke: boolean;
  machine: { cpus: number; cpuModel: string; node: string; envoy: string; openai: string };
  settings: FailoverSettings;
  phases: PhaseReport[];
}

/** A response the pod sent just before the fault can still be arriving this long after it. */
export const GRACE_MS = 1_000;
/**
 * The filter applies a failure on every worker within a tick (20 ms) of the request's end; the client that sees
 * that end and the pod's front that sees the next attempt are late or early by their event loop's lag.
 */
export const LEDGER_GRACE_MS = 500;
/** A gap this long between attempts on the faulty pod ends a burst of them. */
export const QUIET_MS = 2_000;

const round = (ms: number) => Math.round(ms);

function bursts(sorted: number[], quietMs: number): Burst[] {
  const out: Burst[] = [];
  for (const t of sorted) {
    const last = out.at(-1);
    if (last && t - last.toMs < quietMs) {
      last.toMs = t;
      last.attempts++;
    } else {
      out.push({ fromMs: t, toMs: t, attempts: 1 });
    }
  }
  return out;
}

/**
 * The filter's ledger ejects a pod at its Nth failure in a row, for ejectMs from its latest failure, and forgets it
 * at a success; it learns an outcome when the request ends (after Envoy's retry elsewhere, for a failure). So the
 * ledger's state follows from when each request that failed on the pod, or succeeded there, ended.
 */
function ledgerEjections(run: PhaseRun, threshold: number, ejectMs: number): { spans: Span[]; longestStreak: number } {
  const failed = new Set(run.failedRequests);
  const outcomes = run.records
    .filter((r) => r.endMs !== undefined && (failed.has(r.index) || (r.servedBy === run.pod && !r.error)))
    .sort((a, b) => a.endMs! - b.endMs!);
  const spans: Span[] = [];
  let streak = 0;
  let longestStreak = 0;
  let until = -Infinity;
  for (const r of outcomes) {
    const t = r.endMs!;
    const open = spans.at(-1);
    if (open && open.toMs === null && t >= until) open.toMs = until;
    if (!failed.has(r.index)) {
      streak = 0;
      if (open && open.toMs === null) open.toMs = t;
      continue;
    }
    longestStreak = Math.max(longestStreak, ++streak);
    if (streak < threshold) continue;
    if (!(open && open.toMs === null)) spans.push({ fromMs: t, toMs: null });
    until = t + ejectMs;
  }
  const last = spans.at(-1);
  if (last && last.toMs === null) last.toMs = until;
  return { spans, longestStreak };
}

export function summarisePhase(run: PhaseRun, settings: FailoverSettings): PhaseReport {
  const fault = run.faultAtMs;
  const records = run.records;
  const failed = records.filter((r) => r.error);
  const ofKind = (k: string) => failed.filter((r) => r.error!.kind === k);
  const byStatus: Record<string, number> = {};
  for (const r of ofKind("status")) {
    const key = [r.error!.status, r.error!.code].filter((x) => x !== undefined).join(" ");
    byStatus[key] = (byStatus[key] ?? 0) + 1;
  }
  const underway = new Set(
    records
      .filter((r) => r.stream && r.servedBy === run.pod && r.headersMs !== undefined && r.headersMs < fault && (r.endMs === undefined || r.endMs >= fault))
      .map((r) => r.index),
  );
  const ends = failed.map((r) => (r.endMs ?? Infinity) - fault);
  const relative = [...run.attemptTimesMs].sort((a, b) => a - b).map((t) => round(t - fault));
  const grouped = bursts(relative, settings.quietMs);
  // A 500 is the one failure every filter build counts in its ledger, so only there can the ledger be derived.
  const ledger = run.phase === "pod-500" ? ledgerEjections(run, settings.gateway.ejectAfterFailures, settings.gateway.ejectMs) : null;
  const firstFailure = run.firstFailureAtMs;
  const toFault = (e: Span): Span => ({ fromMs: round(e.fromMs - fault), toMs: e.toMs === null ? null : round(e.toMs - fault) });
  const counter = (name: string) => run.envoyCounters[name] ?? 0;
  return {
    phase: run.phase,
    title: TITLES[run.phase],
    fault: {
      pod: run.pod,
      atS: run.faultAtMs / 1000,
      aggregatorClosedAtS: run.aggregatorClosedAtMs === null ? null : run.aggregatorClosedAtMs / 1000,
      engineAtFault: run.engineAtFault,
      streamsUnderway: underway.size,
      healthAtFault: run.healthAtFault,
    },
    requests: {
      sent: records.length,
      ok: records.length - failed.length,
      streamed: records.filter((r) => r.stream).length,
      sentAfterFault: records.filter((r) => r.sentMs >= fault).length,
    },
    errors: {
      total: failed.length,
      httpStatus: ofKind("status").length,
      byStatus,
      noResponse: ofKind("no_response").length,
      broken: ofKind("broken").length,
      brokenElsewhere: ofKind("broken").filter((r) => r.servedBy !== run.pod).length,
      timeouts: ofKind("timeout").length,
      windowMs: ends.length === 0 ? null : { first: round(Math.min(...ends)), last: round(Math.max(...ends)) },
    },
    faultyPod: {
      attemptsAfterFault: relative.length,
      countedBy: run.attemptsCountedBy,
      attemptTimesMs: relative,
      bursts: grouped,
      trafficStoppedAfterMs: grouped.length > 0 && grouped[0].fromMs < settings.quietMs ? grouped[0].toMs : 0,
      servedAfterGrace: records.filter((r) => r.servedBy === run.pod && r.headersMs !== undefined && r.headersMs > fault + settings.graceMs).length,
      firstFailureMs: firstFailure === null ? null : round(firstFailure - fault),
      attemptsAfterFirstFailure: firstFailure === null ? 0 : run.attemptTimesMs.filter((t) => t > firstFailure).length,
      envoyEjectionsMs: run.envoyEjections.map(toFault),
      filterEjectionsMs: run.filterEjections.map(toFault),
      ledger: ledger && {
        ejections: ledger.spans.map(toFault),
        longestStreak: ledger.longestStreak,
        attemptsWhileEjected: run.attemptTimesMs.filter((t) => ledger.spans.some((e) => t > e.fromMs + settings.ledgerGraceMs && t < e.toMs!)).length,
      },
    },
    envoy: Object.fromEntries(Object.entries(ENVOY_COUNTERS).map(([k, name]) => [k, counter(name)])) as PhaseReport["envoy"],
    envoyCounters: run.envoyCounters,
    records,
  };
}

const sec = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
/** "1 stream", "3 streams". */
const count = (n: number, noun: string, plural = `${noun}s`) => `${n} ${n === 1 ? noun : plural}`;
/** A time relative to the fault: "+407 ms", "+10.9 s". */
const rel = (ms: number) => `${ms < 0 ? "-" : "+"}${formatMs(Math.abs(ms))}`;

function errorsCell(p: PhaseReport): string {
  const e = p.errors;
  const extra = [e.noResponse > 0 ? `${e.noResponse} without a response` : "", e.timeouts > 0 ? `${e.timeouts} timed out` : ""].filter(Boolean);
  return extra.length > 0 ? `${e.total} (${extra.join(", ")})` : String(e.total);
}

function httpCell(p: PhaseReport): string {
  const parts = Object.entries(p.errors.byStatus).map(([k, n]) => `${n} × ${k}`);
  return parts.length === 0 ? "0" : `${p.errors.httpStatus} (${parts.join(", ")})`;
}

function windowCell(p: PhaseReport): string {
  const w = p.errors.windowMs;
  if (w === null) return "–";
  return rel(w.first) === rel(w.last) ? rel(w.first) : `${rel(w.first)} – ${rel(w.last)}`;
}

function burstsCell(p: PhaseReport): string {
  const b = p.faultyPod.bursts;
  if (b.length === 0) return "0";
  const spans = b.map((x) => `${x.attempts} at ${rel(x.fromMs) === rel(x.toMs) ? rel(x.fromMs) : `${rel(x.fromMs)} – ${rel(x.toMs)}`}`);
  return `${p.faultyPod.attemptsAfterFault} (${spans.join("; ")})`;
}

function detectedCell(p: PhaseReport): string {
  const fp = p.faultyPod;
  return fp.firstFailureMs === null ? "–" : `${fp.attemptsAfterFirstFailure} (from ${rel(fp.firstFailureMs)})`;
}

function stoppedCell(p: PhaseReport): string {
  return p.faultyPod.trafficStoppedAfterMs === 0 ? "at once" : rel(p.faultyPod.trafficStoppedAfterMs);
}

function spansText(spans: Span[]): string {
  return spans.map((e) => `${rel(e.fromMs)} to ${e.toMs === null ? "the end" : rel(e.toMs)}`).join(", then from ");
}

/** What the pod did from the fault on, and what made its first failure visible, for the faults that are the pod's own. */
const POD_FAULT_TEXT: Partial<Record<PhaseName, { did: string; seen: (d: FailoverSettings["deadlines"]) => string }>> = {
  "pod-hung": {
    did: "read every completion and sent nothing back, not even a status line, while its /metrics described an idle engine",
    seen: (d) => `${formatMs(d.firstByteMs)} without a response byte`,
  },
  "pod-breaking-responses": {
    did: "answered every completion with a 200 and then closed the connection: a stream after its first two events (no " +
      "`data: [DONE]`), a plain answer half-way through the body its content-length announced",
    seen: () => "a response cut",
  },
  "pod-stalling-streams": {
    did: "sent each stream its first event and then nothing more, the connection left open (plain answers went through)",
    seen: (d) => `${formatMs(d.streamIdleMs)} of silence in a stream`,
  },
};

function podFaultText(p: PhaseReport, s: FailoverSettings, fault: NonNullable<(typeof POD_FAULT_TEXT)[PhaseName]>): string {
  const e = p.errors;
  const fp = p.faultyPod;
  const kinds = [
    e.broken > 0 ? `${e.broken} cut after their 200` : "",
    e.timeouts > 0 ? `${e.timeouts} still unanswered ${s.drainLimitS} s after the last arrival` : "",
    e.httpStatus + e.noResponse > 0 ? `${e.httpStatus + e.noResponse} failed before a response byte` : "",
  ].filter(Boolean);
  const seen = fp.firstFailureMs === null ? "None of its failures could be seen from the gateway." :
    `Its first failure could be seen at ${rel(fp.firstFailureMs)} (${fault.seen(s.deadlines)}), and ` +
    `${count(fp.attemptsAfterFirstFailure, "attempt")} reached it after that.`;
  const ledger = fp.filterEjectionsMs.length === 0 ? "The filter's ledger never ejected it." :
    `The filter's ledger had it ejected from ${spansText(fp.filterEjectionsMs)} (its gauge, which follows within a second).`;
  return `**${p.title}.** From ${sec(p.fault.atS * 1000)} on, \`${p.fault.pod}\` ${fault.did}. Clients saw ` +
    `${count(e.total, "error")}${kinds.length > 0 ? `: ${kinds.join(", ")}` : ""}. ${seen} ` +
    `${count(fp.attemptsAfterFault, "attempt")} reached it after the fault (counted by the pod). ` +
    `${fp.envoyEjectionsMs.length === 0 ? "Envoy's outlier detection never ejected it." : `Envoy's outlier detection had it ejected from ${spansText(fp.envoyEjectionsMs)}.`} ` +
    `Envoy retried ${count(p.envoy.retries, "attempt")} (${p.envoy.retriesSucceeded} of the retries succeeded); the filter ` +
    `counted ${count(p.envoy.endpointFailures, "endpoint failure")}. ${ledger}`;
}

function phaseText(p: PhaseReport, s: FailoverSettings): string {
  const podFault = POD_FAULT_TEXT[p.phase];
  if (podFault) return podFaultText(p, s, podFault);
  const f = p.fault;
  const e = p.errors;
  const fp = p.faultyPod;
  const pod = `\`${f.pod}\``;
  const retries = `Envoy retried ${count(p.envoy.retries, "attempt")} (${p.envoy.retriesSucceeded} of the retries succeeded)`;
  const reached = `${count(fp.attemptsAfterFault, "attempt")} reached it after the fault (counted ${fp.countedBy === "envoy" ? "by Envoy's per-host counters" : "by the pod"}). ` +
    (fp.envoyEjectionsMs.length === 0 ? "Envoy's outlier detection never ejected it." : `Envoy's outlier detection had it ejected from ${spansText(fp.envoyEjectionsMs)}.`);
  if (p.phase === "pod-500") {
    const ledger = !fp.ledger || fp.ledger.ejections.length === 0 ? "The filter's ledger never ejected it." :
      `The filter's ledger had it ejected from ${spansText(fp.ledger.ejections)} (derived from when the failed requests ` +
      `ended: that is when the filter learns of a failure), and ${count(fp.ledger.attemptsWhileEjected, "attempt")} reached ` +
      `it more than ${formatMs(s.ledgerGraceMs)} into an ejection.`;
    return `**${p.title}.** From ${sec(f.atS * 1000)} on, ${pod} answered every completion at once with a 500 while its ` +
      `/metrics kept describing its idle engine. Clients saw ${count(e.total, "error")}: each 500 came before any response ` +
      `byte. ${retries}; the filter counted ${count(p.envoy.endpointFailures, "endpoint failure")}. ${reached} ${ledger}`;
  }
  const blind = p.phase === "pod-killed" ? "" :
    `The aggregator stopped at ${sec(f.aggregatorClosedAtS! * 1000)}; /health said \`${f.healthAtFault}\` right before the kill, ` +
    `and ${count(p.envoy.routedBlind, "request")} were routed blind (no destination header: Envoy's least-request among the pool's hosts). `;
  const engine = f.engineAtFault ? ` with ${f.engineAtFault.running} requests running and ${f.engineAtFault.waiting} waiting` : "";
  const elsewhere = e.brokenElsewhere === 0 ? "" : ` (${e.brokenElsewhere} of them on other pods)`;
  return `**${p.title}.** ${blind}${pod} was killed at ${sec(f.atS * 1000)}${engine}, ${count(f.streamsUnderway, "stream")} ` +
    `among them already sending tokens. ${count(e.broken, "stream")} broke${elsewhere}; ` +
    `${count(e.httpStatus + e.noResponse, "request")} failed before a response byte. ${retries}: ` +
    `${count(p.envoy.connectFailures, "refused connection")} and ${p.envoy.retries - p.envoy.connectFailures} of the pod's ` +
    `requests reset before their first response byte. ${reached}`;
}

export function failoverMarkdown(r: FailoverReport): string {
  const s = r.settings;
  const g = s.gateway;
  const lines: string[] = [];
  lines.push(`Command: \`${r.command}\` (${r.startedAt}, ${r.elapsedS.toFixed(0)} s in all)`, "");
  lines.push(
    `How many errors does a client see when a pod fails under load? One pool of ${s.pods} fake vLLM pods, the aggregator ` +
      `and Envoy (${s.envoyConcurrency} workers) with the filter, all at default settings but admission, which is off ` +
      `(staleView.maxAgeMs ${g.staleViewMaxAgeMs}, ` +
      `${g.staleViewPolicy}; passive health: ${g.ejectAfterFailures} failures eject a pod for ${g.ejectMs / 1000} s; ` +
      `aggregator staleAfterMs ${g.staleAfterMs}, scrapes every ${g.scrapeIntervalMs} ms). Load: open-loop Poisson arrivals at ` +
      `${s.ratePerS} req/s for ${s.durationS} s (seed ${s.seed}) through the \`openai\` client (${r.machine.openai}, maxRetries 0), ` +
      `every other request streamed, ${s.outputTokens[0]}–${s.outputTokens[1]} output tokens. Each phase runs on a fresh stack ` +
      `with the same arrivals and one fault at ${s.faultAtS} s; in the third the aggregator stops ${s.aggregatorLeadS} s earlier. ` +
      `A killed pod is the busiest one at that moment, so the metrics it leaves behind make it look busy, not idle, ` +
      `until they go stale. Attempts on a dead pod are Envoy's per-host counters (requests plus ` +
      `refused connections) sampled every 100 ms; the 500 pod counts its own. Times are relative to the fault.`,
    "",
    `The last three faults are the pod's own (the fake pod's fault modes, switched on at the fault and never cleared): a hung ` +
      `pod reads each completion and sends nothing, not even a status line, so its engine and /metrics stay idle; a pod ` +
      `cutting responses sends a 200, then closes the connection after a stream's first two events or half a plain ` +
      `answer; a pod stalling streams sends a stream's first event and then nothing, its connection open. A proxy in front ` +
      `of the 500, hung, cutting and stalling pods counts every attempt on them and when each could first be seen to fail ` +
      `from the gateway: a 500, a cut, Envoy abandoning it, or a deadline passing without a byte ` +
      `(${s.deadlines.firstByteMs} ms to the first byte, ${s.deadlines.streamIdleMs} ms between two bytes). ` +
      "The gateway's config sets the same deadlines (profiles.latency.deadlines). " +
      `"Attempts after a failure could be seen" counts the attempts that reached the pod after the first such moment ` +
      `(a crash is seen at once). Every request the client sent counts: a refusal, a cut, or no answer ` +
      `${s.drainLimitS} s after the last arrival (a timeout) is an error.`,
    "",
  );
  lines.push(markdownTable(tableOf<PhaseReport>([
    ["Fault", false, (p) => `${p.title} (\`${p.fault.pod}\`)`],
    ["Requests (after the fault)", true, (p) => `${p.requests.sent} (${p.requests.sentAfterFault})`],
    ["Client errors", true, errorsCell],
    ["HTTP status ≠ 200", true, httpCell],
    ["Broken after their 200", true, (p) => String(p.errors.broken)],
    ["Errors seen at", true, windowCell],
    ["Attempts on the faulty pod (bursts)", true, burstsCell],
    ["Traffic to it stopped after", true, stoppedCell],
    ["Attempts after a failure could be seen", true, detectedCell],
    ["Envoy retries", true, (p) => String(p.envoy.retries)],
    ["Envoy ejections", true, (p) => String(p.envoy.ejections)],
    ["Filter ejections", true, (p) => String(p.faultyPod.filterEjectionsMs.length)],
    ["Filter endpoint failures", true, (p) => String(p.envoy.endpointFailures)],
  ], r.phases)));
  lines.push("");
  for (const p of r.phases) lines.push(`- ${phaseText(p, s)}`);
  lines.push(
    "",
    "When a pod crashes or answers 500, only a stream that has started can be lost: Envoy has forwarded its 200 and first tokens and never retries a " +
      "response it has begun, so the client's stream ends with an error. It ends about a second after the crash, when " +
      "Envoy closes the client's HTTP/1.1 connection after its delayed-close wait (delayed_close_timeout, 1 s by default). " +
      "Everything else fails before a response byte and is retried on another pod: a refused connection, a reset before " +
      "the first token (a non-streamed answer only leaves the pod when it is complete), a 500. The faulty pod keeps " +
      "getting attempts while the filter still names it first (until its metrics go stale, after " +
      `aggregator.staleAfterMs, or the filter's ledger has counted ${g.ejectAfterFailures} failures, which it learns only ` +
      "when each retried request has finished), since Envoy's override_host tries a named pod even while outlier " +
      "detection has it ejected. Without the filter's view, least-request goes back to a dead pod whenever its ejection " +
      "runs out, until two refused connections have it ejected again.",
    "",
    "With deadlines, a hung pod's first request waits out the first-byte deadline and is retried on another pod; " +
      "Envoy moved it, so the filter's ledger ejects the pod at once, and the requests it holds stay counted on it " +
      "until they end. A stalled stream is cut after the idle bound (the client sees the stream end early) and " +
      "counts against the pod, as does a stream that ends without its terminal event.",
    "",
    `Machine: ${r.machine.cpus} × ${r.machine.cpuModel}, Node ${r.machine.node}, Envoy ${r.machine.envoy}. The fake pods, ` +
      "the aggregator, the client and Envoy share it over loopback; timings move between runs by tens of milliseconds, " +
      "and which pod is busiest at the fault changes how many streams it was carrying.",
  );
  return lines.join("\n") + "\n";
}
