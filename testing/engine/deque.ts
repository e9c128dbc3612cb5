/** Array-backed double-ended queue: O(1) amortised push/pop at both ends. */
export class Deque<T> {
  private items: (T | undefined)[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  peek(): T | undefined {
    return this.items[this.head];
  }

  pushBack(v: T): void {
    this.items.push(v);
  }

  pushFront(v: T): void {
    if (this.head > 0) this.items[--this.head] = v;
    else this.items.unshift(v);
  }

  popFront(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const v = this.items[this.head];
    this.items[this.head++] = undefined;
    // Compact once the dead prefix dominates, keeping memory bounded.
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return v;
  }

  /** Remove the first element matching `pred` (O(n); used for rare aborts). */
  remove(pred: (v: T) => boolean): T | undefined {
    for (let i = this.head; i < this.items.length; i++) {
      const v = this.items[i] as T;
      if (pred(v)) {
        this.items.splice(i, 1);
        return v;
      }
    }
    return undefined;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    for (let i = this.head; i < this.items.length; i++) yield this.items[i] as T;
  }
}
