/**
 * HTTP front of one fake model-server pod: the OpenAI-compatible routes vLLM
 * serves, /metrics in the pod's dialect, /health, and optional /admin hooks.
 * Every response carries `x-served-by: <pod name>`; completion answers also
 * carry `x-fake-parsed-model`, the model as the pod read the body, so tests
 * can check that the gateway routed on the same name.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { RequestRejectedError, type RequestStats } from "../engine/index.js";
import type { RealtimeDriver, RequestListener } from "./driver.js";
import type { MetricsRenderer } from "./metrics.js";
import {
  type ApiKind,
  ApiError,
  type CompletionRequest,
  fillerText,
  fillerToken,
  finishChunk,
  fullResponse,
  invalidRequest,
  parseCompletionRequest,
  type ResponseMeta,
  sse,
  textChunk,
  usage,
  usageChunk,
} from "./openai.js";

export interface LoadRequest {
  /** Synthetic requests to queue. */
  requests: number;
  promptTokens?: number;
  maxTokens?: number;
}

export interface PodContext {
  name: string;
  model: string;
  adapters: ReadonlySet<string>;
  driver: RealtimeDriver;
  metrics: MetricsRenderer;
  /** Serve /admin/state and /admin/load. */
  admin: boolean;
  injectLoad(load: LoadRequest): void;
}

const MAX_BODY_BYTES = 16 * 1024 * 1024;

export function createPodServer(ctx: PodContext): Server {
  return createServer((req, res) => {
    res.setHeader("x-served-by", ctx.name);
    route(ctx, req, res).catch((err: unknown) => {
      const apiErr =
        err instanceof ApiError
          ? err
          : err instanceof RequestRejectedError
            ? invalidRequest(err.message, null, err.code)
            : new ApiError(500, String(err), "internal_error", null, "internal_error");
      if (!res.headersSent) sendJson(res, apiErr.status, apiErr.body());
      else res.destroy();
    });
  });
}

async function route(ctx: PodContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = new URL(req.url ?? "/", "http://pod").pathname;
  const method = req.method ?? "GET";
  const allow = (m: string): void => {
    if (method !== m) throw invalidRequest(`Method ${method} not allowed on ${path}`, null, "method_not_allowed", 405);
  };
  switch (path) {
    case "/v1/chat/completions":
      allow("POST");
      return completion(ctx, "chat", req, res);
    case "/v1/completions":
      allow("POST");
      return completion(ctx, "completion", req, res);
    case "/v1/models":
      allow("GET");
      return sendJson(res, 200, models(ctx));
    case "/health":
      allow("GET");
      res.writeHead(200).end();
      return;
    case "/metrics":
      allow("GET");
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
      res.end(ctx.metrics.render(ctx.driver.engine.metrics(), Date.now() / 1000));
      return;
  }
  if (ctx.admin && path === "/admin/state") {
    allow("GET");
    return sendJson(res, 200, ctx.driver.engine.metrics());
  }
  if (ctx.admin && path === "/admin/load") {
    allow("POST");
    return adminLoad(ctx, await readJson(req), res);
  }
  throw new ApiError(404, `No route for ${method} ${path}`, "invalid_request_error", null, "not_found");
}

function models(ctx: PodContext): object {
  const created = Math.floor(Date.now() / 1000);
  const maxModelLen = ctx.driver.engine.maxRequestTokens;
  const card = (id: string, parent: string | null): object => ({
    id,
    object: "model",
    created,
    owned_by: "vllm",
    root: id,
    parent,
    max_model_len: maxModelLen,
  });
  return { object: "list", data: [card(ctx.model, null), ...[...ctx.adapters].map((a) => card(a, ctx.model))] };
}

async function completion(ctx: PodContext, kind: ApiKind, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = await readJson(req);
  const model = parsedModelHeader(body);
  if (model !== undefined) res.setHeader(PARSED_MODEL_HEADER, model);
  const parsed = parseCompletionRequest(kind, body);
  if (parsed.model !== ctx.model && !ctx.adapters.has(parsed.model)) {
    throw invalidRequest(`The model \`${parsed.model}\` does not exist.`, "model", "model_not_found", 404);
  }
  const meta: ResponseMeta = {
    kind,
    id: `${kind === "chat" ? "chatcmpl" : "cmpl"}-${randomUUID().replace(/-/g, "")}`,
    created: Math.floor(Date.now() / 1000),
    model: parsed.model,
  };
  const adapter = parsed.model === ctx.model ? undefined : parsed.model;
  let done = false;
  const markDone = (): void => {
    done = true;
  };
  const listener: RequestListener = parsed.stream
    ? streamListener(parsed, meta, res, markDone)
    : {
        onFinish: (s) => {
          markDone();
          sendJson(res, 200, respond(meta, s));
        },
      };
  try {
    ctx.driver.submit({ id: meta.id, prompt: parsed.prompt, maxTokens: parsed.maxTokens, adapter }, listener);
  } catch (err) {
    if (err instanceof RequestRejectedError) {
      const param = err.code === "context_length_exceeded" ? (kind === "chat" ? "messages" : "prompt") : null;
      throw invalidRequest(err.message, param, err.code);
    }
    throw err;
  }
  // A client that hangs up early frees its engine slot, as vLLM aborts it.
  res.on("close", () => {
    if (!done) ctx.driver.abort(meta.id);
  });
}

function respond(meta: ResponseMeta, s: RequestStats): object {
  return fullResponse(meta, fillerText(s.outputTokens), "length", usage(s.promptTokens, s.outputTokens, s.cachedTokens));
}

/** SSE stream: headers with the first token, one chunk per token, then finish, usage, [DONE]. */
function streamListener(
  parsed: CompletionRequest,
  meta: ResponseMeta,
  res: ServerResponse,
  markDone: () => void,
): RequestListener {
  return {
    onToken: (index) => {
      if (index === 0) {
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
      }
      res.write(sse(textChunk(meta, fillerToken(index), index === 0)));
    },
    onFinish: (s) => {
      markDone();
      res.write(sse(finishChunk(meta, "length")));
      if (parsed.includeUsage) res.write(sse(usageChunk(meta, usage(s.promptTokens, s.outputTokens, s.cachedTokens))));
      res.end(sse("[DONE]"));
    },
  };
}

function adminLoad(ctx: PodContext, body: unknown, res: ServerResponse): void {
  const b = (body ?? {}) as Record<string, unknown>;
  const int = (k: string): number | undefined => {
    const v = b[k];
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw invalidRequest(`${k} must be a non-negative integer`, k, "invalid_request");
    return v;
  };
  const requests = int("requests") ?? 0;
  const promptTokens = int("promptTokens");
  const maxTokens = int("maxTokens");
  if (b.speed !== undefined) {
    if (typeof b.speed !== "number" || !(b.speed > 0)) throw invalidRequest("speed must be > 0", "speed", "invalid_request");
    ctx.driver.engine.config.speed = b.speed;
  }
  ctx.injectLoad({ requests, promptTokens, maxTokens });
  sendJson(res, 200, ctx.driver.engine.metrics());
}

const PARSED_MODEL_HEADER = "x-fake-parsed-model";

/**
 * `model` percent-encoded for a header; none when it is no string or holds a
 * lone surrogate (JSON allows "\ud800"; encodeURIComponent cannot encode it).
 */
function parsedModelHeader(body: unknown): string | undefined {
  const model = (body as { model?: unknown } | null)?.model;
  if (typeof model !== "string") return undefined;
  try {
    return encodeURIComponent(model);
  } catch {
    return undefined;
  }
}

// vLLM runs json.loads on the raw bytes: strict UTF-8, one leading BOM
// stripped (TextDecoder strips it too), the last of duplicate keys kept
// (as JSON.parse does).
const utf8 = new TextDecoder("utf-8", { fatal: true });

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw invalidRequest("Request body too large", null, "body_too_large", 413);
    chunks.push(chunk as Buffer);
  }
  let text: string;
  try {
    text = utf8.decode(Buffer.concat(chunks));
  } catch {
    throw invalidRequest("Request body is not valid UTF-8", null, "invalid_json");
  }
  try {
    return JSON.parse(text);
  } catch {
    throw invalidRequest("Request body is not valid JSON", null, "invalid_json");
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}
