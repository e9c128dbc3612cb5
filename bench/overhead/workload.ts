// What the overhead benchmark sends and routes over: an OpenAI chat body of an
// exact size, and a snapshot whose one pool lists every upstream port.
import { DEFAULT_WEIGHTS } from "../../host/config.js";
import type { SnapshotMsg } from "../../host/proto.js";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";

export const BENCH_MODEL = "bench-model";
export const BENCH_POOL = "bench";
export const CHAT_PATH = "/v1/chat/completions";

const FILLER =
  "The deployment log below shows intermittent timeouts between the API tier and the cache cluster; " +
  "summarise the likely causes, list what to check first, and suggest a rollback plan if needed. ";

/** How many SSE events the upstream sends for a streamed request, before the usage event and [DONE]. */
export const STREAM_CHUNKS = 500;

function chatJson(content: string, stream: boolean): string {
  return JSON.stringify({
    model: BENCH_MODEL,
    messages: [
      { role: "system", content: "You are a careful site-reliability assistant." },
      { role: "user", content },
    ],
    temperature: 0.2,
    max_tokens: 256,
    stream,
    ...(stream ? { stream_options: { include_usage: true } } : {}),
  });
}

/** The size of the bench body with an empty user message (the larger, streamed, variant). */
export const MIN_CHAT_BODY_BYTES = chatJson("", true).length;

/** A chat-completions JSON body of exactly `bytes` bytes (ASCII), with `model` set; `stream` asks for SSE with usage. */
export function chatBody(bytes: number, stream = false): string {
  const room = bytes - chatJson("", stream).length;
  if (room < 0) throw new Error(`body size ${bytes} is below the ${MIN_CHAT_BODY_BYTES} bytes of an empty chat request`);
  return chatJson(FILLER.repeat(Math.ceil(room / FILLER.length)).slice(0, room), stream);
}

/** The upstream's answer to a request that is not streamed. */
export const JSON_ANSWER = JSON.stringify({
  id: "chatcmpl-bench",
  object: "chat.completion",
  created: 0,
  model: BENCH_MODEL,
  choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
});

const sse = (data: unknown) => `data: ${JSON.stringify(data)}\n\n`;
const chunk = (choices: unknown[], usage: unknown = null) =>
  sse({ id: "chatcmpl-bench", object: "chat.completion.chunk", created: 0, model: BENCH_MODEL, choices, usage });

/** The streamed answer, event by event: STREAM_CHUNKS content deltas, the finish, the usage, [DONE]. */
export function streamEvents(chunks = STREAM_CHUNKS): string[] {
  const events = Array.from({ length: chunks }, () => chunk([{ index: 0, delta: { content: "tok" }, finish_reason: null }]));
  events.push(chunk([{ index: 0, delta: {}, finish_reason: "stop" }]));
  events.push(chunk([], { prompt_tokens: 1, completion_tokens: chunks, total_tokens: chunks + 1 }));
  events.push("data: [DONE]\n\n");
  return events;
}

/**
 * One pool serving BENCH_MODEL on every address, all equally idle and fresh,
 * with the gateway's default weights (every scorer on): the in-flight counts
 * are what spread consecutive picks over the endpoints.
 */
export function benchSnapshot(addresses: string[]): SnapshotMsg {
  return snapshot([pool(BENCH_POOL, BENCH_MODEL, addresses.map((address) => endpoint(address)), DEFAULT_WEIGHTS)]);
}
