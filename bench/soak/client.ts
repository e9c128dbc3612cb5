// Sends the planned requests through the gateway with the official openai
// client (its retries off: every answer is the gateway's own), and records
// what the client saw: status, the pod that answered (x-served-by), whether
// a 200 arrived whole.
import OpenAI from "openai";
import type { ErrorKind } from "../failover/load.js";
import type { PlannedRequest } from "./traffic.js";

export interface RequestRecord {
  index: number;
  kind: PlannedRequest["kind"];
  model: string;
  stream: boolean;
  priority: string | null;
  /** Times in ms since the start of the load. */
  sentMs: number;
  /** When a 200's headers arrived. */
  headersMs?: number;
  endMs?: number;
  /** x-served-by of the answer: the pod that sent the 200 (or its error). */
  servedBy: string | null;
  outputTokens: number;
  error?: {
    kind: ErrorKind;
    status?: number;
    code?: string;
    param?: string;
    /** The answer had a Retry-After header (429s must). */
    retryAfter?: boolean;
    message: string;
  };
}

/** A request still running this long is given up as a timeout. */
export const REQUEST_TIMEOUT_MS = 60_000;
// The user turns differ per request; the openings are shared, several blocks long.
const OPENINGS = Array.from({ length: 6 }, (_, k) => `You are assistant number ${k}. `.repeat(24));

export function newClient(gatewayUrl: string): OpenAI {
  return new OpenAI({ baseURL: `${gatewayUrl}/v1`, apiKey: "unused", maxRetries: 0, timeout: REQUEST_TIMEOUT_MS });
}

/** Sends one request and fills `record` as it goes; never throws. */
export async function send(client: OpenAI, planned: PlannedRequest, record: RequestRecord, clock: () => number, signal: AbortSignal): Promise<void> {
  const headers: Record<string, string> = planned.priority === null ? {} : { "x-llm-priority": planned.priority };
  try {
    const answer = await ask(client, planned, { headers, signal });
    record.headersMs = clock();
    record.servedBy = answer.response.headers.get("x-served-by");
    const { tokens, finished } = await answer.read();
    record.outputTokens = tokens;
    // The fake engine always generates max_tokens: a 200 with fewer was cut short.
    if (!finished || tokens !== planned.maxTokens) {
      record.error = { kind: "broken", message: `${tokens} of ${planned.maxTokens} tokens${finished ? "" : ", no finish_reason"}` };
    }
  } catch (err) {
    record.error = describe(err, record, signal);
  }
  record.endMs = clock();
}

/** A 200 as it arrives: its headers, then its tokens. */
interface Answer {
  response: Response;
  read(): Promise<{ tokens: number; finished: boolean }>;
}

interface RequestOptions {
  headers: Record<string, string>;
  signal: AbortSignal;
}

function ask(client: OpenAI, planned: PlannedRequest, options: RequestOptions): Promise<Answer> {
  const opening = OPENINGS[planned.prefix % OPENINGS.length];
  const question = `Request ${planned.index}: answer in a few words.`;
  const { model, maxTokens: max_tokens } = planned;
  switch (planned.kind) {
    case "completion": {
      const body = { model, prompt: opening + question, max_tokens };
      return planned.stream
        ? streamed(client.completions.create({ ...body, stream: true }, options), (c) => [Boolean(c.choices[0]?.text), Boolean(c.choices[0]?.finish_reason)])
        : whole(client.completions.create(body, options));
    }
    case "malformed-json": {
      // Raw bytes go out as they are: a body cut off in the middle of a string.
      const cut = new TextEncoder().encode(`{"model":"${model}","messages":[{"role":"user","content":"${question}`);
      return whole(client.post("/chat/completions", { ...options, body: cut, headers: { ...options.headers, "content-type": "application/json" } }));
    }
    default: {
      const messages = [{ role: "system" as const, content: opening }, { role: "user" as const, content: question }];
      const body = { model, messages, max_tokens };
      return planned.stream
        ? streamed(client.chat.completions.create({ ...body, stream: true }, options), (c) => [Boolean(c.choices[0]?.delta?.content), Boolean(c.choices[0]?.finish_reason)])
        : whole(client.chat.completions.create(body, options));
    }
  }
}

interface Call<T> {
  withResponse(): Promise<{ data: T; response: Response }>;
}

/** A streamed answer: `piece` says whether a chunk carries a token and whether it finishes the answer. */
async function streamed<C>(call: Call<AsyncIterable<C>>, piece: (chunk: C) => readonly [boolean, boolean]): Promise<Answer> {
  const { data, response } = await call.withResponse();
  return {
    response,
    async read() {
      let tokens = 0;
      let finished = false;
      for await (const chunk of data) {
        const [token, finish] = piece(chunk);
        if (token) tokens++;
        if (finish) finished = true;
      }
      return { tokens, finished };
    },
  };
}

/** An answer in one body, its token count from `usage`. */
async function whole(call: Call<unknown>): Promise<Answer> {
  const { data, response } = await call.withResponse();
  const usage = (data as { usage?: { completion_tokens?: number } } | null)?.usage;
  return { response, read: async () => ({ tokens: usage?.completion_tokens ?? 0, finished: true }) };
}

function describe(err: unknown, record: RequestRecord, signal: AbortSignal): NonNullable<RequestRecord["error"]> {
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
      retryAfter: err.headers?.get("retry-after") != null,
      message,
    };
  }
  return { kind: "no_response", message };
}
