// The pool's slots ordered by a key, for taking the best few on every
// request. A max-tree finds them in log(n) steps per slot taken; since only
// a few slots change between two requests (those whose in-flight figures
// moved), the tree also keeps its best slots in a list that each change
// patches, and is walked again only when changes have emptied the list
// below what a request takes.

/** The key of a slot that may not be chosen. */
export const NONE: f64 = -f64.MAX_VALUE;

/** Slots listed per slot taken: changes may drop this many before the tree is walked again. */
const LISTED_PER_TAKEN: i32 = 2;

let walkAlways = false;

/** For tests of the list against the tree: with `on`, every take() walks the tree as if no list were kept. */
export function walkEveryTake(on: bool): void {
  walkAlways = on;
}

/**
 * Node k of the tree holds the best slot (-1: none) of the leaves below it,
 * so the best is at the root and a key changes in log(n) steps. Equal keys
 * break by `ties`.
 */
export class ScoreTree {
  private keys: StaticArray<f64> = new StaticArray<f64>(0);
  private ties: StaticArray<u64> = new StaticArray<u64>(0);
  private tree: StaticArray<i32> = new StaticArray<i32>(0);
  private leaves: i32 = 0;
  /** The best `listedCount` slots, best first, when `listed`; every slot with a key when also `complete`. */
  private list: StaticArray<i32>;
  private listedCount: i32 = 0;
  private listed: bool = false;
  private complete: bool = false;

  /** `count`: how many slots take() gives. */
  constructor(private readonly count: i32) {
    this.list = new StaticArray<i32>(count * LISTED_PER_TAKEN);
  }

  /** Sized for `n` slots (0: unused); set() every key, then build(). */
  reset(n: i32, ties: StaticArray<u64>): void {
    this.listed = false;
    this.ties = ties;
    let leaves = 1;
    while (leaves < n) leaves <<= 1;
    this.leaves = n == 0 ? 0 : leaves;
    if (n == 0) return;
    if (this.keys.length < n) this.keys = new StaticArray<f64>(n);
    if (this.tree.length < 2 * leaves) this.tree = new StaticArray<i32>(2 * leaves);
    for (let k = 0; k < leaves; k++) unchecked(this.tree[leaves + k] = k < n ? k : -1);
  }

  build(): void {
    for (let k = this.leaves - 1; k >= 1; k--) unchecked(this.tree[k] = this.better(unchecked(this.tree[2 * k]), unchecked(this.tree[2 * k + 1])));
  }

  /** The slot's key becomes `key`; with `reorder` the tree follows at once, else at the next build(). */
  set(slot: i32, key: f64, reorder: bool = true): void {
    unchecked(this.keys[slot] = key);
    if (!reorder) return;
    this.climb(slot);
    if (this.listed) this.relist(slot, key);
  }

  /** Appends to `out` those of the best `count` slots not stamped `generation`, stamping them. */
  take(out: i32[], stamp: StaticArray<u32>, generation: u32): void {
    if (walkAlways || !this.listed || (this.listedCount < this.count && !this.complete)) this.walk();
    const list = this.list;
    const n = min(this.count, this.listedCount);
    for (let i = 0; i < n; i++) {
      const slot = unchecked(list[i]);
      if (unchecked(stamp[slot]) == generation) continue;
      unchecked(stamp[slot] = generation);
      out.push(slot);
    }
  }

  /** Lists the best slots anew: pops them off the tree, then puts their keys back. */
  private walk(): void {
    this.listed = false;
    const list = this.list;
    const keys = this.keys;
    let n = 0;
    while (n < list.length && this.leaves > 0) {
      const best = unchecked(this.tree[1]);
      if (best < 0 || unchecked(keys[best]) == NONE) break;
      unchecked(list[n++] = best);
      // Off the tree while the next ones are found; its key stays as it was.
      unchecked(this.tree[this.leaves + best] = -1);
      this.climb(best);
    }
    for (let i = n - 1; i >= 0; i--) {
      const slot = unchecked(list[i]);
      unchecked(this.tree[this.leaves + slot] = slot);
      this.climb(slot);
    }
    this.listedCount = n;
    this.complete = n < list.length;
    this.listed = true;
  }

  /** The tree above `slot`'s leaf agrees with the keys again. */
  private climb(slot: i32): void {
    let k = (this.leaves + slot) >> 1;
    while (k >= 1) {
      const best = this.better(unchecked(this.tree[2 * k]), unchecked(this.tree[2 * k + 1]));
      // The same other winner as before: nothing above changes.
      if (best == unchecked(this.tree[k]) && best != slot) return;
      unchecked(this.tree[k] = best);
      k >>= 1;
    }
  }

  /**
   * The list after `slot`'s key became `key`: out of the list, then back in
   * where it belongs if it still beats the last listed slot (every other
   * slot not listed is worse than that one); a slot that no longer does
   * may be beaten by slots not listed, so it leaves and the list shortens.
   */
  private relist(slot: i32, key: f64): void {
    const list = this.list;
    let n = this.listedCount;
    let at = 0;
    while (at < n && unchecked(list[at]) != slot) at++;
    if (at < n) {
      for (let i = at + 1; i < n; i++) unchecked(list[i - 1] = list[i]);
      n--;
    }
    if (key != NONE && (this.complete || (n > 0 && this.better(slot, unchecked(list[n - 1])) == slot))) {
      if (n == list.length) {
        n--;
        this.complete = false;
      }
      let p = n;
      while (p > 0 && this.better(slot, unchecked(list[p - 1])) == slot) {
        unchecked(list[p] = list[p - 1]);
        p--;
      }
      unchecked(list[p] = slot);
      n++;
    }
    this.listedCount = n;
  }

  private better(a: i32, b: i32): i32 {
    if (a < 0) return b;
    if (b < 0) return a;
    const ka = unchecked(this.keys[a]);
    const kb = unchecked(this.keys[b]);
    if (ka != kb) return ka > kb ? a : b;
    return unchecked(this.ties[a]) >= unchecked(this.ties[b]) ? a : b;
  }
}
