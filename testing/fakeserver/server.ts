/**
 * HTTP front of one fake model-server pod: the OpenAI-compatible routes vLLM
 * serves, /metrics in the pod's dialect, /health, and optional /admin hooks.
 * Completions obey the pod's fault mode (faults.ts).
 * Every response carries `x-served-by: <pod name>`; completion answers also
 * carry `x-fake-parsed-model`, the model as the pod read the body, so tests
 * can check that the gateway routed on the same name.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type RequestListener as HttpHandler, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { RequestRejectedError, type RequestStats } from "../engine/index.js";
import type { RealtimeDriver, RequestListener } from "./driver.js";
import { FAULT_MODES, type FaultMode, type PodFaults } from "./faults.js";
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
  faults: PodFaults;
  /** Serve /admin/state, /admin/load and /admin/fault. */
  admin: boolean;
  injectLoad(load: LoadRequest): void;
}

const MAX_BODY_BYTES = 16 * 1024 * 1024;

/** The pod's HTTP server; with `tls`, HTTPS on the same handlers. */
export function createPodServer(ctx: PodContext, tls?: { cert: string; key: string }): Server {
  const handler: HttpHandler = (req, res) => {
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
  };
  return tls ? (createHttpsServer(tls, handler) as unknown as Server) : createServer(handler);
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
  // vLLM's sleep mode routes (entrypoints/openai/api_server.py, with VLLM_SERVER_DEV_MODE=1).
  if (ctx.metrics.format === "vllm" && (path === "/sleep" || path === "/wake_up")) {
    allow("POST");
    ctx.metrics.asleep = path === "/sleep";
    res.writeHead(200).end();
    return;
  }
  if (ctx.metrics.format === "vllm" && path === "/is_sleeping") {
    allow("GET");
    return sendJson(res, 200, { is_sleeping: ctx.metrics.asleep });
  }
  if (ctx.admin && path === "/admin/state") {
    allow("GET");
    return sendJson(res, 200, ctx.driver.engine.metrics());
  }
  if (ctx.admin && path === "/admin/load") {
    allow("POST");
    return adminLoad(ctx, await readJson(req), res);
  }
  if (ctx.admin && path === "/admin/fault") {
    allow("POST");
    return adminFault(ctx, await readJson(req), res);
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
  if (ctx.faults.mode === "hang" && !(await hangUntilCleared(ctx.faults, res))) return;
  const fault = ctx.faults.mode;
  if (fault === "overloaded") throw new ApiError(429, "Model is overloaded", "overloaded", null, "overloaded");
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
    ? streamListener(parsed, meta, res, markDone, fault, ctx.faults)
    : {
        onFinish: (s) => {
          markDone();
          if (fault === "break-streams") sendHalfJson(res, respond(meta, s));
          else sendJson(res, 200, respond(meta, s));
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

/** Resolves true when the hang is cleared, false if the connection closed first (nothing is to be sent then). */
function hangUntilCleared(faults: PodFaults, res: ServerResponse): Promise<boolean> {
  return new Promise((resolve) => {
    res.once("close", () => resolve(false));
    faults.hold(res, "hang", () => resolve(true));
    if (res.closed) resolve(false);
  });
}

/** Events a broken stream sends before its connection is destroyed. */
const EVENTS_BEFORE_BREAK = 2;

/**
 * SSE stream: headers with the first token, one chunk per token, then finish,
 * usage, [DONE]. Under `break-streams` the connection is destroyed once the
 * first events are out; under `stream-error` an error event and [DONE] follow
 * them; under `stall-stream` everything after the first event waits for the
 * fault to clear.
 */
function streamListener(
  parsed: CompletionRequest,
  meta: ResponseMeta,
  res: ServerResponse,
  markDone: () => void,
  fault: FaultMode | null,
  faults: PodFaults,
): RequestListener {
  let events = 0;
  let cut = false;
  /** Text held back by a stall; null while the stream flows. */
  let stalled: string | null = null;
  let endOnRelease = false;
  const send = (text: string, last = false): void => {
    if (cut) return;
    if (stalled !== null) {
      stalled += text;
      endOnRelease ||= last;
      return;
    }
    events++;
    if (fault === "stream-error" && events === EVENTS_BEFORE_BREAK) {
      cut = true;
      const error = { error: { message: "The engine failed while generating", type: "InternalServerError", param: null, code: 500 } };
      res.end(text + sse(error) + sse("[DONE]"));
      return;
    }
    if (fault === "break-streams" && events === EVENTS_BEFORE_BREAK) {
      cut = true;
      // Destroyed once the event is on the socket: the client gets it, then loses the connection.
      res.write(text, () => res.destroy());
      return;
    }
    if (last) res.end(text);
    else res.write(text);
    if (fault === "stall-stream" && events === 1) {
      stalled = "";
      faults.hold(res, "stall-stream", () => {
        const held = stalled ?? "";
        stalled = null;
        if (endOnRelease) res.end(held);
        else res.write(held);
      });
    }
  };
  return {
    onToken: (index) => {
      if (index === 0) {
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
      }
      send(sse(textChunk(meta, fillerToken(index), index === 0)));
    },
    onFinish: (s) => {
      // A cut stream is not done: the connection's close aborts its engine request.
      if (cut) return;
      markDone();
      send(sse(finishChunk(meta, "length")));
      if (parsed.includeUsage) send(sse(usageChunk(meta, usage(s.promptTokens, s.outputTokens, s.cachedTokens))));
      send(sse("[DONE]"), true);
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

function adminFault(ctx: PodContext, body: unknown, res: ServerResponse): void {
  const mode = (body as { mode?: unknown } | null)?.mode;
  if (mode !== null && !FAULT_MODES.includes(mode as FaultMode)) {
    throw invalidRequest(`mode must be null or one of ${FAULT_MODES.join(", ")}`, "mode", "invalid_request");
  }
  ctx.faults.set(mode as FaultMode | null);
  sendJson(res, 200, { mode: ctx.faults.mode });
}

/** A 200 whose content-length promises the whole body, and a connection destroyed half-way through it. */
function sendHalfJson(res: ServerResponse, body: unknown): void {
  const text = Buffer.from(JSON.stringify(body));
  res.writeHead(200, { "content-type": "application/json", "content-length": text.length });
  res.write(text.subarray(0, text.length >> 1), () => res.destroy());
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}
