// Address hash -> position in a pool, as an open-addressing table of plain
// arrays: one probe sequence and no allocation per lookup. The prefix index
// looks holders up here up to 80 times per decision, where a Map's has + get
// was the costliest step of scoring a 64-pod pool.

export class SlotTable {
  private keys: StaticArray<u64> = new StaticArray<u64>(16);
  private values: StaticArray<i32> = new StaticArray<i32>(16);
  private count: i32 = 0;

  /** The slot stored for `hash`, or -1. */
  get(hash: u64): i32 {
    const k = hash == 0 ? 1 : hash;
    const mask = this.keys.length - 1;
    let i = <i32>(k ^ (k >> 32)) & mask;
    while (true) {
      const have = unchecked(this.keys[i]);
      if (have == k) return unchecked(this.values[i]);
      if (have == 0) return -1;
      i = (i + 1) & mask;
    }
  }

  set(hash: u64, slot: i32): void {
    if ((this.count + 1) * 2 > this.keys.length) this.grow();
    this.put(hash == 0 ? 1 : hash, slot);
  }

  private put(k: u64, slot: i32): void {
    const mask = this.keys.length - 1;
    let i = <i32>(k ^ (k >> 32)) & mask;
    while (true) {
      const have = unchecked(this.keys[i]);
      if (have == k) break;
      if (have == 0) {
        this.count++;
        break;
      }
      i = (i + 1) & mask;
    }
    unchecked(this.keys[i] = k);
    unchecked(this.values[i] = slot);
  }

  private grow(): void {
    const oldKeys = this.keys;
    const oldValues = this.values;
    this.keys = new StaticArray<u64>(oldKeys.length * 2);
    this.values = new StaticArray<i32>(oldKeys.length * 2);
    this.count = 0;
    for (let i = 0; i < oldKeys.length; i++) {
      const k = unchecked(oldKeys[i]);
      if (k != 0) this.put(k, unchecked(oldValues[i]));
    }
  }
}
