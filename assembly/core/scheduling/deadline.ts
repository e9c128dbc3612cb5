// The per-try deadline to a response's first byte, for answers that are not
// streamed: how long Envoy lets one pod take before it gives up on that try
// and sends the request to the next pod the filter listed. A fixed bound
// would either wait minutes on a hung pod or cut a legitimately long
// prefill, so it grows with the work asked:
//
//   deadline = firstByteMs + prompt tokens x promptMsPerKToken / 1000
//              + output tokens x outputMsPerToken
//
// Such an answer sends its first byte when it is complete, so its deadline
// covers the output: max_tokens when given, else the profile's assumed
// output. Prompt tokens are estimated from the prompt's bytes (about 4 per
// token, as the prefix blocks assume). A stream gets none: its route bounds
// every silence, the first byte's included (streamIdleMs), and Envoy stops
// that bound once a per-try timeout has seen the response start.
import { Deadlines, MAX_DEADLINE_MS } from "../fleet/snapshot";

const BYTES_PER_TOKEN: i64 = 4;

/** The deadline in ms, 1..MAX_DEADLINE_MS; 0 for a stream, or when the profile sets none. */
export function firstByteDeadlineMs(d: Deadlines, promptBytes: i32, stream: bool, maxTokens: i64): u32 {
  if (d.firstByteMs == 0 || stream) return 0;
  const promptTokens = <i64>max(promptBytes, 0) / BYTES_PER_TOKEN;
  let ms = <i64>d.firstByteMs + promptTokens * <i64>d.promptMsPerKToken / 1000;
  ms += (maxTokens > 0 ? min(maxTokens, <i64>MAX_DEADLINE_MS) : <i64>d.assumedOutputTokens) * <i64>d.outputMsPerToken;
  return <u32>min(ms, <i64>MAX_DEADLINE_MS);
}
