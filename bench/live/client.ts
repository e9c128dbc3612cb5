// Replays a trace against a gateway in real time, open loop: every request
// leaves at its arrival time whether or not earlier ones finished. Requests
// stream (SSE), so TTFT is measured where a client sees it: the first token.
// Each carries its class in PRIORITY_HEADER; a 429 with Retry-After is sent
// again once after that many seconds (as the simulated client does), and
// its latencies then count from the retry.
import { TIMEOUT, type Priority, type RequestRecord } from "../types.js";
import { requestBody, type Trace, type TraceRequest } from "../sim/workload.js";
import { POOL_HEADER } from "../baseline-envoy.js";

/** The request header a client states its class in (the gateway may downgrade a Critical it does not trust). */
export const PRIORITY_HEADER = "x-llm-priority";

export interface ReplayTarget {
  url: string;
  /** Pool name per scenario model index, sent in POOL_HEADER (only baselines route on it). */
  poolNames: string[];
  /** Pod index by the name in a response's x-served-by header. */
  podIndex: Map<string, number>;
}

export interface ReplayOptions {
  /** Requests still running this long after the last arrival are abandoned as timeouts. */
  drainLimitMs: number;
  onProgress?: (fraction: number) => void;
}

/**
 * The drain deadline as one AbortController per open request, all aborted by
 * one timer, rather than one signal every request listens to: fetch caps a
 * shared signal's listeners at 1500 and warns past that, and an overloaded
 * run keeps thousands of requests open.
 */
class Deadline {
  private readonly open = new Set<AbortController>();
  private passed = false;
  private readonly timer: NodeJS.Timeout;

  constructor(ms: number) {
    this.timer = setTimeout(() => {
      this.passed = true;
      for (const c of this.open) c.abort();
      this.open.clear();
    }, ms);
  }

  /** A signal aborted at the deadline; `done` once its request no longer needs it. */
  attach(): { signal: AbortSignal; done: () => void } {
    const c = new AbortController();
    if (this.passed) c.abort();
    else this.open.add(c);
    return { signal: c.signal, done: () => this.open.delete(c) };
  }

  clear(): void {
    clearTimeout(this.timer);
  }
}

export async function replay(trace: Trace, target: ReplayTarget, opts: ReplayOptions): Promise<RequestRecord[]> {
  const requests = trace.requests;
  const lastArrival = requests.length > 0 ? requests[requests.length - 1].arrivalMs : 0;
  const start = performance.now();
  const deadline = new Deadline(lastArrival + opts.drainLimitMs);
  const pending: Array<Promise<RequestRecord>> = [];
  try {
    for (const r of requests) {
      const wait = start + r.arrivalMs - performance.now();
      if (wait > 1) await new Promise((res) => setTimeout(res, wait));
      opts.onProgress?.(lastArrival > 0 ? r.arrivalMs / lastArrival : 1);
      // Usage in the last chunk tells how much of the prompt the pod had cached.
      const body = requestBody(trace, r).replace(/}$/, ',"stream_options":{"include_usage":true}}');
      const { signal, done } = deadline.attach();
      pending.push(sendWithRetry(target, body, r, signal).finally(done));
    }
    return await Promise.all(pending);
  } finally {
    deadline.clear();
  }
}

/** Retry-After in seconds (the delay form; an HTTP date is not what the gateway sends); null without one. */
export function retryAfterSeconds(header: string | null): number | null {
  if (header === null || !/^\s*\d+(\.\d+)?\s*$/.test(header)) return null;
  return Number(header);
}

async function sendWithRetry(target: ReplayTarget, body: string, r: TraceRequest, signal: AbortSignal): Promise<RequestRecord> {
  const record: RequestRecord = { arrivalMs: r.arrivalMs, priority: r.priority, pod: -1, error: undefined, promptTokens: 0, cachedTokens: 0, outputTokens: 0 };
  const firstSent = performance.now();
  const pool = target.poolNames[r.pool];
  const retryAfterS = await send(target, body, pool, r.priority, record, signal);
  if (retryAfterS === undefined) return record;
  record.refusedRetryAfterS = retryAfterS;
  if (retryAfterS === null) return record;
  try {
    await sleep(retryAfterS * 1000, signal);
  } catch {
    return record; // the drain deadline passed first: the refusal stands
  }
  record.retryArrivalMs = r.arrivalMs + (performance.now() - firstSent);
  resetOutcome(record);
  await send(target, body, pool, r.priority, record, signal);
  return record;
}

function resetOutcome(record: RequestRecord): void {
  record.pod = -1;
  record.error = undefined;
  record.ttftMs = undefined;
  record.e2eMs = undefined;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * One attempt, its outcome written into `record`. Returns the Retry-After
 * (s, or null without one) of a 429, undefined for any other outcome.
 */
async function send(
  target: ReplayTarget,
  body: string,
  pool: string,
  priority: Priority,
  record: RequestRecord,
  signal: AbortSignal,
): Promise<number | null | undefined> {
  const sent = performance.now();
  try {
    const res = await fetch(`${target.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", [POOL_HEADER]: pool, [PRIORITY_HEADER]: priority },
      body,
      signal,
    });
    record.pod = target.podIndex.get(res.headers.get("x-served-by") ?? "") ?? -1;
    if (res.status !== 200) {
      const text = await res.text();
      const code = /"code":"([^"]+)"/.exec(text)?.[1];
      record.error = code ? `${res.status} ${code}` : String(res.status);
      return res.status === 429 ? retryAfterSeconds(res.headers.get("retry-after")) : undefined;
    }
    const decoder = new TextDecoder();
    let buffered = "";
    for await (const chunk of res.body!) {
      if (record.ttftMs === undefined) record.ttftMs = performance.now() - sent;
      buffered += decoder.decode(chunk, { stream: true });
      let end: number;
      while ((end = buffered.indexOf("\n\n")) >= 0) {
        readEvent(buffered.slice(0, end), record);
        buffered = buffered.slice(end + 2);
      }
    }
    record.e2eMs = performance.now() - sent;
  } catch (err) {
    if (signal.aborted) {
      // Censored at the deadline, as the simulator does: a dropped request still counts as slow.
      record.error = TIMEOUT;
      record.e2eMs = performance.now() - sent;
      record.ttftMs ??= record.e2eMs;
    } else {
      record.error = `client ${(err as Error).message}`;
      record.ttftMs = undefined;
    }
  }
  return undefined;
}

/** Takes the usage chunk's counts; the other chunks carry one token each. */
function readEvent(event: string, record: RequestRecord): void {
  if (!event.startsWith("data: {")) return;
  const data = JSON.parse(event.slice(6)) as {
    usage?: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };
  };
  if (!data.usage) return;
  record.promptTokens = data.usage.prompt_tokens;
  record.outputTokens = data.usage.completion_tokens;
  record.cachedTokens = data.usage.prompt_tokens_details?.cached_tokens ?? 0;
}
