// One request as a client sees it, sent with the official openai client (its
// own retries off: every answer is the gateway's): when its headers and its
// first token came, which pod answered (x-served-by), the usage, and how it
// failed. Every live load (the live mode, the soak, the failover bench)
// sends through here and keeps a RequestRecord (bench/types.ts).
import OpenAI from "openai";
import { sdkRetries, sdkRetryDelayMs } from "../sdk-retry.js";
import type { Outcome, Planned, RequestError, RequestRecord } from "../types.js";

/** What goes on the wire: a chat or text completion, or bytes sent as they are. */
export interface ClientRequest {
  route: "chat" | "completion";
  /** The JSON body, or raw bytes (a malformed body on purpose). */
  body: Record<string, unknown> | Uint8Array;
  stream: boolean;
  headers: Record<string, string>;
  /**
   * The tokens a whole answer has (the fake engines generate max_tokens).
   * When set, an answer with fewer, or a stream without a finish_reason, is a cut one.
   */
  expectedTokens?: number;
}

export function newClient(gatewayUrl: string, timeoutMs?: number): OpenAI {
  return new OpenAI({ baseURL: `${gatewayUrl}/v1`, apiKey: "unused", maxRetries: 0, ...(timeoutMs ? { timeout: timeoutMs } : {}) });
}

const fresh = (sentMs: number): Outcome => ({
  sentMs, headersMs: undefined, firstTokenMs: undefined, endMs: undefined, servedBy: null, promptTokens: 0, cachedTokens: 0, outputTokens: 0, error: undefined,
});

export function newRecord<P extends Planned>(planned: P, sentMs: number): RequestRecord<P> {
  return { ...planned, ...fresh(sentMs) };
}

/** Retry-After in seconds (the delay form; an HTTP date is not what the gateway sends); null without one. */
export function retryAfterSeconds(header: string | null | undefined): number | null {
  if (header == null || !/^\s*\d+(\.\d+)?\s*$/.test(header)) return null;
  return Number(header);
}

export interface SendOptions {
  clock: () => number;
  signal: AbortSignal;
  /**
   * A 429 or 5xx is sent again as the OpenAI SDKs would send it (bench/sdk-retry.ts;
   * the delay cut short by the signal). The SDK's own retries stay off so
   * that every attempt is timed and counted here.
   */
  retryRefusal?: boolean;
}

/** Sends `request` and fills `record` as it goes; never throws. */
export async function send(client: OpenAI, request: ClientRequest, record: RequestRecord, opts: SendOptions): Promise<void> {
  await attempt(client, request, record, opts);
  const firstSentMs = record.sentMs;
  for (let retries = 0; opts.retryRefusal; retries++) {
    const e = record.error;
    if (e?.kind !== "status" || e.status === undefined || !sdkRetries(e.status)) return;
    const retryAfterS = e.retryAfterS ?? null;
    record.firstRefusal ??= { retryAfterS, retryArrivalsMs: [] };
    const delayMs = sdkRetryDelayMs(retryAfterS, retries, Math.random);
    if (delayMs === null) return;
    try {
      await sleep(delayMs, opts.signal);
    } catch {
      return; // the drain deadline passed first: the refusal stands
    }
    Object.assign(record, fresh(opts.clock()));
    // On the plan's clock: the first attempt left at its planned time (give or take the timers).
    record.firstRefusal.retryArrivalsMs.push(record.atMs + (record.sentMs - firstSentMs));
    await attempt(client, request, record, opts);
  }
}

async function attempt(client: OpenAI, request: ClientRequest, record: Outcome, opts: SendOptions): Promise<void> {
  const options = { headers: request.headers, signal: opts.signal };
  const onHeaders = (response: Response) => {
    record.headersMs = opts.clock();
    record.servedBy = response.headers.get("x-served-by");
  };
  try {
    if (request.body instanceof Uint8Array) {
      const call = client.post(`/${request.route === "chat" ? "chat/completions" : "completions"}`, {
        ...options, body: request.body, headers: { ...request.headers, "content-type": "application/json" },
      });
      // Resolves when the headers of a 2xx arrive, before the body is read: a body cut after them is a broken answer.
      call.asResponse().then(onHeaders, () => {});
      readUsage(record, await call);
    } else if (request.stream) {
      const params = { ...request.body, stream: true, stream_options: { include_usage: true } } as never;
      const call = request.route === "chat" ? client.chat.completions.create(params, options) : client.completions.create(params, options);
      const { data, response } = await (call as unknown as Call<AsyncIterable<Chunk>>).withResponse();
      onHeaders(response);
      let finished = false;
      for await (const chunk of data) {
        record.firstTokenMs ??= opts.clock();
        const choice = chunk.choices?.[0];
        if (choice?.delta?.content || choice?.text) record.outputTokens++;
        if (choice?.finish_reason) finished = true;
        if (chunk.usage) readUsage(record, chunk);
      }
      // The SDK ends an aborted stream quietly, as if the pod had.
      if (opts.signal.aborted) throw new Error(`stream still running after ${record.outputTokens} tokens when the load stopped waiting`);
      if (!finished && request.expectedTokens !== undefined) record.error = { kind: "broken", message: `stream ended after ${record.outputTokens} tokens without a finish_reason` };
    } else {
      const params = { ...request.body, stream: false } as never;
      const call = request.route === "chat" ? client.chat.completions.create(params, options) : client.completions.create(params, options);
      call.asResponse().then(onHeaders, () => {});
      const data: unknown = await call;
      record.firstTokenMs = opts.clock();
      readUsage(record, data);
    }
    if (!record.error && request.expectedTokens !== undefined && record.outputTokens !== request.expectedTokens) {
      record.error = { kind: "broken", message: `${record.outputTokens} of ${request.expectedTokens} tokens` };
    }
  } catch (err) {
    record.error = describe(err, record, opts.signal);
  }
  record.endMs = opts.clock();
}

interface Call<T> {
  withResponse(): Promise<{ data: T; response: Response }>;
}

interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number };
}

interface Chunk {
  choices?: Array<{ delta?: { content?: string | null }; text?: string; finish_reason?: string | null }>;
  usage?: Usage | null;
}

function readUsage(record: Outcome, data: unknown): void {
  const usage = (data as { usage?: Usage | null } | null)?.usage;
  if (!usage) return;
  record.promptTokens = usage.prompt_tokens ?? 0;
  record.outputTokens = usage.completion_tokens ?? 0;
  record.cachedTokens = usage.prompt_tokens_details?.cached_tokens ?? 0;
}

function describe(err: unknown, record: Outcome, signal: AbortSignal): RequestError {
  const message = (err as Error).message ?? String(err);
  if (signal.aborted || err instanceof OpenAI.APIConnectionTimeoutError) return { kind: "timeout", message };
  if (record.headersMs !== undefined) return { kind: "broken", message };
  if (err instanceof OpenAI.APIError && err.status !== undefined) {
    record.servedBy = err.headers?.get("x-served-by") ?? null;
    const body = err.error as { code?: unknown; param?: unknown } | undefined;
    return {
      kind: "status",
      status: err.status,
      ...(typeof body?.code === "string" ? { code: body.code } : {}),
      ...(typeof body?.param === "string" ? { param: body.param } : {}),
      retryAfterS: retryAfterSeconds(err.headers?.get("retry-after")),
      message,
    };
  }
  return { kind: "no_response", message };
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
