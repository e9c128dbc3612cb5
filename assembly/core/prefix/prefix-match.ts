// How many of a prompt's leading prefix keys each endpoint of a pool holds,
// kept sparse: every endpoint holds at least `common` (the leading keys so
// hot that every pod counts as holding them), and only the few the index
// names as holders go further. So a match costs what the index holds, not
// what the pool has, and needs no clearing between requests.

export class PrefixMatch {
  /** Leading keys every endpoint of the pool counts as holding. */
  common: i32 = 0;
  /** Pool slots matched beyond `common` (each once), in the order they were first matched. */
  readonly deeper: i32[] = [];
  private depth: StaticArray<i32> = new StaticArray<i32>(0);
  private stamp: StaticArray<u32> = new StaticArray<u32>(0);
  private generation: u32 = 0;

  /** Starts a match over a pool of `slots` endpoints: everyone at 0. */
  reset(slots: i32): void {
    if (this.depth.length < slots) {
      this.depth = new StaticArray<i32>(slots);
      this.stamp = new StaticArray<u32>(slots);
      this.generation = 0;
    }
    this.generation++;
    if (this.generation == 0) {
      for (let i = 0; i < this.stamp.length; i++) unchecked(this.stamp[i] = 0);
      this.generation = 1;
    }
    this.common = 0;
    this.deeper.length = 0;
  }

  /** Leading keys held by the endpoint at `slot`. */
  of(slot: i32): i32 {
    return unchecked(this.stamp[slot]) == this.generation ? unchecked(this.depth[slot]) : this.common;
  }

  /** The endpoint at `slot` holds one key more than it did. */
  advance(slot: i32): void {
    if (unchecked(this.stamp[slot]) != this.generation) {
      unchecked(this.stamp[slot] = this.generation);
      unchecked(this.depth[slot] = this.common);
      this.deeper.push(slot);
    }
    unchecked(this.depth[slot]++);
  }

  /** Every endpoint that holds exactly `k` keys holds one more: key k is held everywhere it could be. */
  advanceAll(k: i32): void {
    for (let i = 0; i < this.deeper.length; i++) {
      const slot = unchecked(this.deeper[i]);
      if (unchecked(this.depth[slot]) == k) unchecked(this.depth[slot] = k + 1);
    }
    if (this.common == k) this.common = k + 1;
  }
}
