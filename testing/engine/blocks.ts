/**
 * KV block pool with a prefix cache, after vLLM's block manager: blocks with
 * no holder sit in a free queue ordered least-recently-freed first; a freed
 * block keeps its hash (stays reusable) until allocation pops it from the
 * head of the queue and evicts it. Reusing a cached free block pulls it out of
 * the queue, so eviction is LRU over unreferenced blocks.
 */
export class BlockPool {
  readonly numBlocks: number;
  private readonly refCount: Int32Array;
  /** Hash a block is registered under in `cache`, or -1. */
  private readonly hashOf: Float64Array;
  private readonly cache = new Map<number, number>();
  // Doubly linked free queue over block ids; index numBlocks is the sentinel.
  private readonly prev: Int32Array;
  private readonly next: Int32Array;
  private free: number;

  constructor(numBlocks: number) {
    this.numBlocks = numBlocks;
    this.refCount = new Int32Array(numBlocks);
    this.hashOf = new Float64Array(numBlocks).fill(-1);
    this.prev = new Int32Array(numBlocks + 1);
    this.next = new Int32Array(numBlocks + 1);
    const s = numBlocks;
    this.prev[s] = this.next[s] = s;
    for (let b = 0; b < numBlocks; b++) this.append(b);
    this.free = numBlocks;
  }

  /** Blocks not held by any request (cached-but-unreferenced blocks count as free). */
  get numFree(): number {
    return this.free;
  }

  get numUsed(): number {
    return this.numBlocks - this.free;
  }

  /** Cached blocks for the longest prefix of `hashes` (at most `maxBlocks`). */
  match(hashes: readonly number[], maxBlocks: number): number[] {
    const out: number[] = [];
    const n = Math.min(hashes.length, maxBlocks);
    for (let i = 0; i < n; i++) {
      const b = this.cache.get(hashes[i]);
      if (b === undefined) break;
      out.push(b);
    }
    return out;
  }

  /** How many of `blocks` are currently unreferenced (reusing them consumes free capacity). */
  countUnreferenced(blocks: readonly number[]): number {
    let n = 0;
    for (const b of blocks) if (this.refCount[b] === 0) n++;
    return n;
  }

  /** Take a reference on a cached block. */
  acquire(b: number): void {
    if (this.refCount[b]++ === 0) {
      this.unlink(b);
      this.free--;
    }
  }

  /** Take a fresh block from the head of the free queue, evicting whatever it cached. */
  allocate(): number {
    const s = this.numBlocks;
    const b = this.next[s];
    if (b === s) throw new Error("BlockPool: no free block");
    this.unlink(b);
    this.free--;
    this.refCount[b] = 1;
    const h = this.hashOf[b];
    if (h >= 0) {
      this.cache.delete(h);
      this.hashOf[b] = -1;
    }
    return b;
  }

  /**
   * Drop one reference on each block. Tail blocks are queued first so they are
   * evicted before the shared prefix blocks of the same request.
   */
  release(blocks: readonly number[]): void {
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i];
      if (--this.refCount[b] === 0) {
        this.append(b);
        this.free++;
      }
    }
  }

  /** Make a fully computed block findable by its hash (first writer wins on duplicates). */
  register(b: number, hash: number): void {
    if (this.hashOf[b] >= 0 || this.cache.has(hash)) return;
    this.cache.set(hash, b);
    this.hashOf[b] = hash;
  }

  private append(b: number): void {
    const s = this.numBlocks;
    const last = this.prev[s];
    this.next[last] = b;
    this.prev[b] = last;
    this.next[b] = s;
    this.prev[s] = b;
  }

  private unlink(b: number): void {
    const p = this.prev[b];
    const n = this.next[b];
    this.next[p] = n;
    this.prev[n] = p;
  }
}
