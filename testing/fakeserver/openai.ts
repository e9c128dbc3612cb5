/**
 * The OpenAI-compatible wire format as vLLM serves it: request parsing,
 * error bodies, and response / stream-chunk shapes. No I/O here.
 */
import { z } from "zod";

export type ApiKind = "chat" | "completion";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null,
    readonly code: string,
  ) {
    super(message);
    this.name = "ApiError";
  }

  body(): { error: { message: string; type: string; param: string | null; code: string } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export function invalidRequest(message: string, param: string | null, code: string, status = 400): ApiError {
  return new ApiError(status, message, "invalid_request_error", param, code);
}

export const DEFAULT_MAX_TOKENS = 16;

const contentPart = z.object({ type: z.string(), text: z.string().optional() }).loose();
const chatMessage = z
  .object({
    role: z.string(),
    content: z.union([z.string(), z.array(contentPart)]).nullable().optional(),
  })
  .loose();

const common = {
  model: z.string().min(1),
  max_tokens: z.number().int().min(1).nullable().optional(),
  max_completion_tokens: z.number().int().min(1).nullable().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.object({ include_usage: z.boolean().nullable().optional() }).loose().nullable().optional(),
};

const chatBody = z.object({ ...common, messages: z.array(chatMessage).min(1) }).loose();
const completionBody = z
  .object({ ...common, prompt: z.union([z.string(), z.array(z.string()).length(1)]) })
  .loose();

export interface CompletionRequest {
  kind: ApiKind;
  model: string;
  /** Prompt text as the engine sees it (chat messages rendered through a template). */
  prompt: string;
  maxTokens: number;
  stream: boolean;
  includeUsage: boolean;
}

/** Validate a parsed JSON body; throws ApiError(400) on a malformed request. */
export function parseCompletionRequest(kind: ApiKind, body: unknown): CompletionRequest {
  if (kind === "chat") {
    const r = chatBody.safeParse(body);
    if (!r.success) throw badBody(r.error);
    return {
      kind,
      model: r.data.model,
      prompt: renderChat(r.data.messages),
      maxTokens: r.data.max_completion_tokens ?? r.data.max_tokens ?? DEFAULT_MAX_TOKENS,
      stream: r.data.stream ?? false,
      includeUsage: r.data.stream_options?.include_usage ?? false,
    };
  }
  const r = completionBody.safeParse(body);
  if (!r.success) throw badBody(r.error);
  return {
    kind,
    model: r.data.model,
    prompt: typeof r.data.prompt === "string" ? r.data.prompt : r.data.prompt[0],
    maxTokens: r.data.max_tokens ?? DEFAULT_MAX_TOKENS,
    stream: r.data.stream ?? false,
    includeUsage: r.data.stream_options?.include_usage ?? false,
  };
}

function badBody(err: z.ZodError): ApiError {
  const issue = err.issues[0];
  const param = issue && issue.path.length > 0 ? issue.path.join(".") : null;
  return invalidRequest(z.prettifyError(err), param, "invalid_request");
}

/**
 * Llama-3-like chat template: role headers around each message, ending with
 * an open assistant turn. Shared leading messages give shared prefix blocks.
 */
export function renderChat(messages: z.infer<typeof chatMessage>[]): string {
  let out = "<|begin_of_text|>";
  for (const m of messages) {
    const content =
      typeof m.content === "string" ? m.content : (m.content ?? []).map((p) => p.text ?? "").join("");
    out += `<|start_header_id|>${m.role}<|end_header_id|>\n\n${content}<|eot_id|>`;
  }
  return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

const FILLER = [
  "the", "model", "answers", "with", "plain", "filler", "words", "while", "tokens", "stream", "out", "at",
  "engine", "speed", "and", "nothing", "here", "means", "anything", "at", "all",
];

/** Text of output token `index`; concatenating tokens 0..n-1 gives the whole completion. */
export function fillerToken(index: number): string {
  const word = FILLER[index % FILLER.length];
  return index === 0 ? word : ` ${word}`;
}

export function fillerText(tokens: number): string {
  let s = "";
  for (let i = 0; i < tokens; i++) s += fillerToken(i);
  return s;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export function usage(promptTokens: number, completionTokens: number, cachedTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens },
  };
}

/** Identity shared by every response and chunk of one request. */
export interface ResponseMeta {
  kind: ApiKind;
  id: string;
  created: number;
  model: string;
}

export type FinishReason = "length" | "stop";

export function fullResponse(meta: ResponseMeta, text: string, finish: FinishReason, u: Usage): object {
  const choice =
    meta.kind === "chat"
      ? { index: 0, message: { role: "assistant", content: text }, logprobs: null, finish_reason: finish }
      : { index: 0, text, logprobs: null, finish_reason: finish };
  return { ...envelope(meta, false), choices: [choice], usage: u };
}

/** A stream chunk carrying `text`; the chat variant opens with the assistant role. */
export function textChunk(meta: ResponseMeta, text: string, first: boolean): object {
  const choice =
    meta.kind === "chat"
      ? { index: 0, delta: first ? { role: "assistant", content: text } : { content: text }, logprobs: null, finish_reason: null }
      : { index: 0, text, logprobs: null, finish_reason: null };
  return { ...envelope(meta, true), choices: [choice] };
}

export function finishChunk(meta: ResponseMeta, finish: FinishReason): object {
  const choice =
    meta.kind === "chat"
      ? { index: 0, delta: {}, logprobs: null, finish_reason: finish }
      : { index: 0, text: "", logprobs: null, finish_reason: finish };
  return { ...envelope(meta, true), choices: [choice] };
}

/** Final chunk when stream_options.include_usage is set: no choices, just usage. */
export function usageChunk(meta: ResponseMeta, u: Usage): object {
  return { ...envelope(meta, true), choices: [], usage: u };
}

function envelope(meta: ResponseMeta, chunk: boolean): { id: string; object: string; created: number; model: string } {
  const object = meta.kind === "chat" ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return { id: meta.id, object, created: meta.created, model: meta.model };
}

export function sse(data: object | "[DONE]"): string {
  return `data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`;
}
