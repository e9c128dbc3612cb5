// A small seeded PRNG. Every fuzz case draws from its own generator, derived
// from (run seed, case index), so one case can be regenerated alone.

export class Rng {
  private state: number;

  constructor(seed: number) {
    // xorshift32 must not start at 0.
    this.state = seed >>> 0 || 0x9e3779b9;
  }

  static forCase(seed: number, index: number): Rng {
    let h = Math.imul((seed >>> 0) ^ 0x85ebca6b, 0xc2b2ae35) ^ Math.imul(index + 1, 0x27d4eb2f);
    h = Math.imul(h ^ (h >>> 15), 0x2c1b3c6d);
    h = Math.imul(h ^ (h >>> 12), 0x297a2d39);
    return new Rng(h ^ (h >>> 15));
  }

  /** A uniform 32-bit unsigned integer. */
  next(): number {
    let x = this.state;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.state = x >>> 0;
    return this.state;
  }

  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor((this.next() / 0x100000000) * n);
  }

  /** An integer in [lo, hi]. */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }

  chance(p: number): boolean {
    return this.next() / 0x100000000 < p;
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)];
  }

  /** Picks a key of `weights` with probability proportional to its weight. */
  weighted<K extends string>(weights: Readonly<Record<K, number>>): K {
    const keys = Object.keys(weights) as K[];
    let r = (this.next() / 0x100000000) * keys.reduce((sum, k) => sum + weights[k], 0);
    for (const k of keys) {
      r -= weights[k];
      if (r < 0) return k;
    }
    return keys[keys.length - 1];
  }

  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [items[i], items[j]] = [items[j], items[i]];
    }
    return items;
  }
}
