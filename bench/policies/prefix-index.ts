/**
 * The reference picker's prefix-cache estimate (reference.md section 3): the
 * prompt is cut into 64-character blocks (16 tokens), hashed in a chain seeded
 * by the model name, at most 256 blocks; each pod has an LRU of block hashes
 * sized by its num_gpu_blocks, filled from the picker's own routing decisions
 * (it never sees the real caches).
 */
import { blockHashes } from "../../testing/engine/index.js";

const BLOCK_TOKENS = 16;
const CHARS_PER_TOKEN = 4;
const MAX_BLOCKS = 256;

export function prefixHashes(prompt: string, model: string): number[] {
  return blockHashes(prompt.slice(0, MAX_BLOCKS * BLOCK_TOKENS * CHARS_PER_TOKEN), model, BLOCK_TOKENS, CHARS_PER_TOKEN);
}

export class PrefixIndex {
  /** Per pod; Map insertion order is recency, oldest first. */
  private readonly lru: Map<number, true>[];

  constructor(private readonly capacity: readonly number[]) {
    this.lru = capacity.map(() => new Map());
  }

  /**
   * Matched leading blocks per candidate. A pod's match ends at its first
   * missing block, and the scan ends at the first block no candidate has.
   */
  match(hashes: readonly number[], candidates: readonly number[]): number[] {
    const matched = candidates.map(() => 0);
    for (let b = 0; b < hashes.length; b++) {
      let any = false;
      for (let c = 0; c < candidates.length; c++) {
        if (matched[c] === b && this.lru[candidates[c]].has(hashes[b])) {
          matched[c]++;
          any = true;
        }
      }
      if (!any) break;
    }
    return matched;
  }

  /** Records that the request's blocks are now (about to be) cached on `pod`. */
  add(pod: number, hashes: readonly number[]): void {
    const lru = this.lru[pod];
    for (const h of hashes) {
      lru.delete(h);
      lru.set(h, true);
    }
    for (const h of lru.keys()) {
      if (lru.size <= this.capacity[pod]) break;
      lru.delete(h);
    }
  }
}
