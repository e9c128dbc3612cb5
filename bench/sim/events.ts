/**
 * The discrete-event queue: callbacks ordered by virtual time (ms), ties in
 * scheduling order, so a run is a pure function of its inputs.
 */
export type Handler = (time: number) => void;

interface Entry {
  time: number;
  seq: number;
  fn: Handler;
}

export class EventQueue {
  private heap: Entry[] = [];
  private seq = 0;

  /** Time of the earliest event, or Infinity when empty. */
  peekTime(): number {
    return this.heap.length > 0 ? this.heap[0].time : Infinity;
  }

  at(time: number, fn: Handler): void {
    const heap = this.heap;
    heap.push({ time, seq: this.seq++, fn });
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(heap[i], heap[parent])) break;
      [heap[i], heap[parent]] = [heap[parent], heap[i]];
      i = parent;
    }
  }

  /** Calls `fn` at `first`, then every `period` ms, forever (the run loop decides when to stop). */
  every(first: number, period: number, fn: Handler): void {
    const tick = (t: number): void => {
      fn(t);
      this.at(t + period, tick);
    };
    this.at(first, tick);
  }

  pop(): Entry | undefined {
    const heap = this.heap;
    if (heap.length === 0) return undefined;
    const top = heap[0];
    const last = heap.pop() as Entry;
    if (heap.length > 0) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < heap.length && before(heap[l], heap[m])) m = l;
        if (r < heap.length && before(heap[r], heap[m])) m = r;
        if (m === i) break;
        [heap[i], heap[m]] = [heap[m], heap[i]];
        i = m;
      }
    }
    return top;
  }
}

function before(a: Entry, b: Entry): boolean {
  return a.time < b.time || (a.time === b.time && a.seq < b.seq);
}
