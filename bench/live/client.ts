// Replays a trace against a gateway in real time through the shared open-loop
// client (bench/load/): every request leaves at its arrival time whether or
// not earlier ones finished. Requests stream, so TTFT is measured where a
// client sees it: the first chunk. Each carries its class in PRIORITY_HEADER;
// a refusal is retried as the OpenAI SDKs retry it (bench/sdk-retry.ts, as
// the simulated client does), and its latencies still count from its first arrival.
import { newClient, newRecord, send } from "../load/client.js";
import { openLoop } from "../load/open-loop.js";
import type { Priority, RequestRecord } from "../types.js";
import { requestBody, type Trace, type TraceRequest } from "../sim/workload.js";
import { POOL_HEADER } from "../baseline-envoy.js";

/** The request header a client states its class in (the gateway may downgrade a Critical it does not trust). */
export const PRIORITY_HEADER = "x-llm-priority";

export interface ReplayTarget {
  url: string;
  /** Pool name per scenario model index, sent in POOL_HEADER (only baselines route on it). */
  poolNames: string[];
}

export interface ReplayOptions {
  /** Requests still running this long after the last arrival are abandoned as timeouts. */
  drainLimitMs: number;
  onProgress?: (fraction: number) => void;
}

/** A replayed request's record: the stats read it as a simulated one's. */
export type Replayed = RequestRecord<{ atMs: number; priority: Priority; request: TraceRequest }>;

export async function replay(trace: Trace, target: ReplayTarget, opts: ReplayOptions): Promise<Replayed[]> {
  const requests = trace.requests;
  const lastArrival = requests.length > 0 ? requests[requests.length - 1].arrivalMs : 0;
  const client = newClient(target.url);
  const start = performance.now();
  const clock = () => performance.now() - start;
  const records: Replayed[] = [];
  await openLoop(
    requests.map((request) => ({ atMs: request.arrivalMs, priority: request.priority, request })),
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
  return records;
}
