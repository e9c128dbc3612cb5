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

function chatJson(content: string): string {
  return JSON.stringify({
    model: BENCH_MODEL,
    messages: [
      { role: "system", content: "You are a careful site-reliability assistant." },
      { role: "user", content },
    ],
    temperature: 0.2,
    max_tokens: 256,
    stream: false,
  });
}

/** The size of the bench body with an empty user message. */
export const MIN_CHAT_BODY_BYTES = chatJson("").length;

/** A chat-completions JSON body of exactly `bytes` bytes (ASCII), with `model` set. */
export function chatBody(bytes: number): string {
  const room = bytes - MIN_CHAT_BODY_BYTES;
  if (room < 0) throw new Error(`body size ${bytes} is below the ${MIN_CHAT_BODY_BYTES} bytes of an empty chat request`);
  return chatJson(FILLER.repeat(Math.ceil(room / FILLER.length)).slice(0, room));
}

/**
 * One pool serving BENCH_MODEL on every address, all equally idle and fresh,
 * with the gateway's default weights (every scorer on): the in-flight counts
 * are what spread consecutive picks over the endpoints.
 */
export function benchSnapshot(addresses: string[]): SnapshotMsg {
  return snapshot([pool(BENCH_POOL, BENCH_MODEL, addresses.map((address) => endpoint(address)), DEFAULT_WEIGHTS)]);
}
