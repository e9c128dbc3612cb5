// Replays a trace against a gateway in real time through the shared open-loop
// client (bench/load/): every request leaves at its arrival time whether or
// not earlier ones finished. Requests stream, so TTFT is measured where a
// client sees it: the first chunk. Each carries its class in PRIORITY_HEADER;
// a 429 with Retry-After is sent again once after that many seconds (as the
// simulated client does), and its latencies then count from the retry.
import { newClient, newRecord, send, type ClientError, type ClientRecord } from "../load/client.js";
import { openLoop } from "../load/open-loop.js";
import { TIMEOUT, type RequestRecord } from "../types.js";
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

type Replayed = ClientRecord<{ atMs: number; request: TraceRequest }>;

export async function replay(trace: Trace, target: ReplayTarget, opts: ReplayOptions): Promise<RequestRecord[]> {
  const requests = trace.requests;
  const lastArrival = requests.length > 0 ? requests[requests.length - 1].arrivalMs : 0;
  const client = newClient(target.url);
  const start = performance.now();
  const clock = () => performance.now() - start;
  const records: Replayed[] = [];
  await openLoop(
    requests.map((request) => ({ atMs: request.arrivalMs, request })),
    (planned, signal) => {
      const r = planned.request;
      opts.onProgress?.(lastArrival > 0 ? r.arrivalMs / lastArrival : 1);
      const record = newRecord(planned, clock());
      records.push(record);
      const headers = { [POOL_HEADER]: target.poolNames[r.pool], [PRIORITY_HEADER]: r.priority };
      return send(client, { route: "chat", body: JSON.parse(requestBody(trace, r)), stream: true, headers }, record, { clock, signal, retryRefusal: true });
    },
    { clock, drainLimitMs: opts.drainLimitMs },
  );
  return records.map((r) => summaryRecord(r, target.podIndex));
}

/** The live record as the stats read it, in a simulated one's shape: latencies from the served attempt's sending. */
function summaryRecord(r: Replayed, podIndex: Map<string, number>): RequestRecord {
  const { request } = r;
  const out: RequestRecord = {
    arrivalMs: request.arrivalMs,
    priority: request.priority,
    pod: podIndex.get(r.servedBy ?? "") ?? -1,
    error: errorText(r.error),
    promptTokens: r.promptTokens,
    cachedTokens: r.cachedTokens,
    outputTokens: r.outputTokens,
  };
  if (r.retry) {
    out.refusedRetryAfterS = r.retry.afterS;
    out.retryArrivalMs = request.arrivalMs + (r.sentMs - r.retry.firstSentMs);
  } else if (r.error?.kind === "status" && r.error.status === 429) {
    // Not retried: it had no Retry-After, or the drain deadline came first.
    out.refusedRetryAfterS = r.error.retryAfterS ?? null;
  }
  if (r.error?.kind === "timeout") {
    // Censored at the deadline, as the simulator does: a dropped request still counts as slow.
    out.e2eMs = r.endMs! - r.sentMs;
    out.ttftMs = r.firstTokenMs === undefined ? out.e2eMs : r.firstTokenMs - r.sentMs;
  } else if (r.error === undefined) {
    out.ttftMs = r.firstTokenMs === undefined ? undefined : r.firstTokenMs - r.sentMs;
    out.e2eMs = r.endMs! - r.sentMs;
  }
  return out;
}

/** The error as the results count it: "429 pool_saturated", "503", TIMEOUT, "client <why>". */
function errorText(e: ClientError | undefined): string | undefined {
  if (e === undefined) return undefined;
  switch (e.kind) {
    case "status":
      return e.code ? `${e.status} ${e.code}` : String(e.status);
    case "timeout":
      return TIMEOUT;
    default:
      return `client ${e.message}`;
  }
}
