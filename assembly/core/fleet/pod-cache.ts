// An endpoint's KV cache as the prefix index models it: an LRU of its
// capacity in blocks, whose clock is the blocks written to it so far. Kept on
// the decoded endpoint so scoring finds it without a lookup.

/** KV capacity assumed for an endpoint whose engine does not report it (the simulator's default). */
export const DEFAULT_KV_BLOCKS: u64 = 8192;

export class PodCache {
  /** Blocks written to the endpoint so far: an LRU's clock. */
  clock: u64 = 0;
  capacity: u64 = DEFAULT_KV_BLOCKS;
}
