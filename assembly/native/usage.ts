// The answer side for the native build: token counts from a model server's
// usage object, read as the filter reads them (core/openai/usage.ts).
import { findUsage, Usage, UsageTail } from "../core/openai/usage";

let usageTail = new UsageTail();
const usage = new Usage();

function usageJson(found: bool): string {
  if (!found) return "null";
  return '{"promptTokens":' + usage.promptTokens.toString() + ',"completionTokens":' + usage.completionTokens.toString() + "}";
}

/** The last complete usage in a whole body: {"promptTokens","completionTokens"} or null. */
export function usageIn(body: Uint8Array): string {
  return usageJson(findUsage(body.dataStart, body.byteLength, usage));
}

/** Starts a new answer's tail, as a stream's first response chunk does. */
export function usageTailReset(): void {
  usageTail = new UsageTail();
}

/** One response chunk, of which the filter reads only the part UsageTail.wanted allows (its end). */
export function usageTailPush(chunk: Uint8Array): i32 {
  const wanted = UsageTail.wanted(chunk.byteLength);
  usageTail.push(chunk.dataStart + <usize>(chunk.byteLength - wanted), wanted);
  return wanted;
}

/** What the filter counts when the stream ends: the usage in the tail, or null. */
export function usageTailFind(): string {
  return usageJson(usageTail.find(usage));
}

/** How a stream whose chunks went through usageTailPush ended (core/openai/usage.ts StreamEnd); `responses`: a Responses API stream. */
export function usageTailStreamEnd(responses: bool): i32 {
  return usageTail.streamEnd(responses);
}
