// The failover bench's load: requests at seeded Poisson arrival times, sent
// open loop through the shared client (bench/load/).
import { newClient, newRecord, send, type ClientRequest } from "../../bench/load/client.js";
import { openLoop } from "../../bench/load/open-loop.js";
import type { RequestRecord } from "../../bench/types.js";
import { deriveSeed, Rng } from "../fixtures/rng.js";

export interface PlannedRequest {
  index: number;
  /** Since the start of the load. */
  atMs: number;
  stream: boolean;
  maxTokens: number;
}

/** Carries the request's index, so a pod's front can tell which requests it failed. */
export const REQUEST_INDEX_HEADER = "x-bench-request";

export const MIN_OUTPUT_TOKENS = 16;
export const MAX_OUTPUT_TOKENS = 64;

/** Every other request streams; output lengths are uniform in [16, 64] tokens. */
export function planArrivals(seed: number, ratePerS: number, durationS: number): PlannedRequest[] {
  const rng = new Rng(deriveSeed(seed, "failover-arrivals"));
  const out: PlannedRequest[] = [];
  for (let t = rng.exponential(ratePerS) * 1000; t < durationS * 1000; t += rng.exponential(ratePerS) * 1000) {
    const index = out.length;
    out.push({ index, atMs: t, stream: index % 2 === 1, maxTokens: MIN_OUTPUT_TOKENS + rng.int(MAX_OUTPUT_TOKENS - MIN_OUTPUT_TOKENS + 1) });
  }
  return out;
}

export type FailoverRecord = RequestRecord<PlannedRequest>;

export interface LoadOptions {
  /** e.g. http://127.0.0.1:8080 */
  baseUrl: string;
  model: string;
  requests: PlannedRequest[];
  /** Milliseconds since the start of the load; shared with whoever injects faults. */
  clock: () => number;
  /** Requests still running this long after the last arrival are abandoned as timeouts. */
  drainLimitMs: number;
  /** Called every 5 s with a one-line status. */
  onProgress?: (line: string) => void;
}

export async function runLoad(opts: LoadOptions): Promise<FailoverRecord[]> {
  const client = newClient(opts.baseUrl);
  const records: FailoverRecord[] = [];
  const progress = opts.onProgress
    ? setInterval(() => {
        const done = records.filter((r) => r.endMs !== undefined).length;
        const errors = records.filter((r) => r.error).length;
        opts.onProgress!(`t=${(opts.clock() / 1000).toFixed(0)} s: ${records.length} sent, ${done} done, ${errors} errors`);
      }, 5_000)
    : undefined;
  const request = (planned: PlannedRequest): ClientRequest => ({
    route: "chat",
    body: { model: opts.model, messages: [{ role: "user", content: `Request ${planned.index}: reply with a few words.` }], max_tokens: planned.maxTokens },
    stream: planned.stream,
    headers: { [REQUEST_INDEX_HEADER]: String(planned.index) },
    expectedTokens: planned.maxTokens,
  });
  try {
    await openLoop(
      opts.requests,
      (planned, signal) => {
        const record = newRecord(planned, opts.clock());
        records.push(record);
        return send(client, request(planned), record, { clock: opts.clock, signal });
      },
      { clock: opts.clock, drainLimitMs: opts.drainLimitMs },
    );
    return records;
  } finally {
    if (progress) clearInterval(progress);
  }
}
