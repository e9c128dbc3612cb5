// The prompt's leading bytes cut into 64-byte blocks (~16 tokens) and hashed
// in a chain seeded by the model, as an engine's prefix cache keys its KV
// blocks: two prompts share the hash at depth d exactly when they share their
// first d blocks. Only some depths are kept (4, 8, 16, 32, 48, 64, 96, 128,
// 192, 256 blocks), so a request carries at most 10 keys and a long match is
// known within a factor of 1.5.
// The bytes are the raw JSON of `messages` / `prompt`, which a client repeats
// byte for byte when it repeats a system prompt or a conversation.
import { hashBlock64 } from "../wire/hash";

export const BLOCK_BYTES: i32 = 64;
/**
 * The depths kept, in blocks: from ~64 tokens (below which a cache hit saves
 * little) to 16 KiB of prompt (the reference picker also stops at 256 blocks).
 */
const DEPTHS: StaticArray<i32> = [4, 8, 16, 32, 48, 64, 96, 128, 192, 256];
export const MAX_KEYS: i32 = 10;
const MAX_DEPTH: i32 = 256;

export class PrefixKeys {
  /** Chained hash at each kept depth, shallowest first. */
  readonly keys: StaticArray<u64> = new StaticArray<u64>(MAX_KEYS);
  /** Blocks covered by keys[k]. */
  readonly depths: StaticArray<i32> = new StaticArray<i32>(MAX_KEYS);
  count: i32 = 0;
  /** Prompt length in bytes: a match is worth its share of it. */
  promptBytes: i32 = 0;

  /** Hashes the prompt at `ptr`; `seed` separates models (a base model and its adapters cache apart). */
  compute(ptr: usize, len: i32, seed: u64): void {
    this.count = 0;
    this.promptBytes = len;
    const blocks = min(len / BLOCK_BYTES, MAX_DEPTH);
    let h = seed;
    for (let b = 0; b < blocks; b++) {
      h = hashBlock64(ptr + <usize>(b * BLOCK_BYTES), h);
      if (b + 1 == unchecked(DEPTHS[this.count])) {
        unchecked(this.keys[this.count] = h);
        unchecked(this.depths[this.count] = b + 1);
        this.count++;
      }
    }
  }

  copyFrom(o: PrefixKeys): void {
    this.count = o.count;
    this.promptBytes = o.promptBytes;
    for (let k = 0; k < o.count; k++) {
      unchecked(this.keys[k] = o.keys[k]);
      unchecked(this.depths[k] = o.depths[k]);
    }
  }

  /** Bytes covered by the first `matched` keys. */
  coveredBytes(matched: i32): i32 {
    return matched == 0 ? 0 : unchecked(this.depths[matched - 1]) * BLOCK_BYTES;
  }
}
