// When a client built on the official OpenAI SDKs sends a refused request
// again, as openai-node's client.ts does it (retryRequest and
// calculateDefaultRetryTimeoutMillis; openai-python's _base_client.py has
// the same rule): up to 2 retries of a 408, 409, 429 or 5xx; the server's
// Retry-After when it is 0 to under 60 s, else exponential backoff from
// 0.5 s (capped at 8 s) less up to 25% jitter. Both the simulated and the
// live clients follow it, so a policy that sends no Retry-After is retried
// as a real client would retry it.

/** openai-node's default maxRetries. */
export const SDK_MAX_RETRIES = 2;

/** A status the SDKs send again. */
export const sdkRetries = (status: number): boolean => status === 408 || status === 409 || status === 429 || status >= 500;

/**
 * Ms until retry number `retriesDone + 1`, or null when the client gives up;
 * `retryAfterS` is the answer's Retry-After (null: none), `random` in [0, 1).
 */
export function sdkRetryDelayMs(retryAfterS: number | null, retriesDone: number, random: () => number): number | null {
  if (retriesDone >= SDK_MAX_RETRIES) return null;
  const askedMs = retryAfterS === null ? NaN : retryAfterS * 1000;
  if (askedMs >= 0 && askedMs < 60_000) return askedMs;
  return Math.min(0.5 * 2 ** retriesDone, 8) * (1 - random() * 0.25) * 1000;
}
