// The failover bench's client: requests leave at seeded Poisson arrival times
// (open loop: whether or not earlier ones finished) through the official
// openai client with its retries off, and each outcome is classified the way
// a client experiences it.
import { setMaxListeners } from "node:events";
import OpenAI from "openai";
import { deriveSeed, Rng } from "../sim/rng.js";

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

/**
 * - `status`: an HTTP status other than 200, before any response byte;
 * - `no_response`: the connection failed before a status line;
 * - `broken`: a 200 whose body was cut or came back short (a stream broken mid-way);
 * - `timeout`: still running when the bench stopped waiting.
 */
export type ErrorKind = "status" | "no_response" | "broken" | "timeout";

export interface RequestRecord {
  index: number;
  stream: boolean;
  maxTokens: number;
  /** Times in ms since the start of the load. */
  sentMs: number;
  /** When the response headers arrived (a 200 only). */
  headersMs?: number;
  endMs?: number;
  /** x-served-by of the final response (after Envoy's retries). */
  servedBy: string | null;
  outputTokens: number;
  error?: { kind: ErrorKind; status?: number; code?: string; message: string };
}

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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runLoad(opts: LoadOptions): Promise<RequestRecord[]> {
  const client = new OpenAI({ baseURL: `${opts.baseUrl}/v1`, apiKey: "unused", maxRetries: 0 });
  const records: RequestRecord[] = [];
  const pending: Array<Promise<void>> = [];
  const deadline = new AbortController();
  // Every request in flight listens on this one signal.
  setMaxListeners(Infinity, deadline.signal);
  const progress = opts.onProgress
    ? setInterval(() => {
        const done = records.filter((r) => r.endMs !== undefined).length;
        const errors = records.filter((r) => r.error).length;
        opts.onProgress!(`t=${(opts.clock() / 1000).toFixed(0)} s: ${records.length} sent, ${done} done, ${errors} errors`);
      }, 5_000)
    : undefined;
  try {
    for (const planned of opts.requests) {
      const wait = planned.atMs - opts.clock();
      if (wait > 1) await sleep(wait);
      const record: RequestRecord = {
        index: planned.index, stream: planned.stream, maxTokens: planned.maxTokens, sentMs: opts.clock(), servedBy: null, outputTokens: 0,
      };
      records.push(record);
      pending.push(send(client, opts, planned, record, deadline.signal));
    }
    const timer = setTimeout(() => deadline.abort(), opts.drainLimitMs);
    await Promise.all(pending);
    clearTimeout(timer);
    return records;
  } finally {
    if (progress) clearInterval(progress);
  }
}

async function send(client: OpenAI, opts: LoadOptions, planned: PlannedRequest, record: RequestRecord, signal: AbortSignal): Promise<void> {
  const body = {
    model: opts.model,
    messages: [{ role: "user" as const, content: `Request ${planned.index}: reply with a few words.` }],
    max_tokens: planned.maxTokens,
  };
  const options = { signal, headers: { [REQUEST_INDEX_HEADER]: String(planned.index) } };
  const onHeaders = (response: Response) => {
    record.headersMs = opts.clock();
    record.servedBy = response.headers.get("x-served-by");
  };
  try {
    if (planned.stream) {
      const { data, response } = await client.chat.completions.create({ ...body, stream: true }, options).withResponse();
      onHeaders(response);
      let finished = false;
      for await (const chunk of data) {
        const choice = chunk.choices[0];
        if (choice?.delta?.content) record.outputTokens++;
        if (choice?.finish_reason) finished = true;
      }
      if (!finished || record.outputTokens !== planned.maxTokens) {
        const tokens = `${record.outputTokens} of ${planned.maxTokens} tokens`;
        // The SDK ends an aborted stream quietly, as if the pod had.
        record.error = signal.aborted
          ? { kind: "timeout", message: `stream still running after ${tokens} when the bench stopped waiting` }
          : { kind: "broken", message: `stream ended after ${tokens} without an error` };
      }
    } else {
      const call = client.chat.completions.create(body, options);
      // Resolves when the headers of a 2xx arrive, before the body is parsed.
      call.asResponse().then(onHeaders, () => {});
      const completion = await call;
      record.outputTokens = completion.usage?.completion_tokens ?? 0;
      if (record.outputTokens !== planned.maxTokens) {
        record.error = { kind: "broken", message: `${record.outputTokens} of ${planned.maxTokens} tokens` };
      }
    }
  } catch (err) {
    record.error = classify(err, record, signal);
  }
  record.endMs = opts.clock();
}

function classify(err: unknown, record: RequestRecord, signal: AbortSignal): NonNullable<RequestRecord["error"]> {
  const message = (err as Error).message ?? String(err);
  if (signal.aborted) return { kind: "timeout", message };
  if (record.headersMs !== undefined) return { kind: "broken", message };
  if (err instanceof OpenAI.APIError && err.status !== undefined) {
    record.servedBy = err.headers?.get("x-served-by") ?? null;
    const code = typeof err.code === "string" ? err.code : undefined;
    return { kind: "status", status: err.status, ...(code ? { code } : {}), message };
  }
  return { kind: "no_response", message };
}
