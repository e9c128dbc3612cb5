/**
 * LoRA adapter bookkeeping. `maxLoras` bounds the distinct adapters in the
 * running batch and the adapters resident in GPU slots; a resident adapter
 * with no running request can be evicted (least recently admitted first) to
 * make room, unless it is pinned (loaded at start and kept, as vLLM's
 * pin_lora keeps one). Running/waiting counts back vLLM's lora_requests_info
 * gauge.
 */
export class LoraTracker {
  /** Resident adapters; Map insertion order is recency (oldest first). */
  private readonly resident = new Map<string, true>();
  private readonly running = new Map<string, number>();
  private readonly waiting = new Map<string, number>();
  /** Resident for good: never evicted, so each holds a slot even with nothing running. */
  private readonly pinned = new Set<string>();

  /** True if a request for `adapter` may join the running batch now. */
  canRun(adapter: string, maxLoras: number): boolean {
    if (this.running.has(adapter) || this.pinned.has(adapter)) return true;
    let busy = this.running.size;
    for (const a of this.pinned) if (!this.running.has(a)) busy++;
    return busy < maxLoras;
  }

  /** Loads `adapter` into a slot now and keeps it there. */
  pin(adapter: string, maxLoras: number): void {
    if (!this.pinned.has(adapter) && this.pinned.size >= maxLoras) {
      throw new RangeError(`cannot pin ${adapter}: all ${maxLoras} LoRA slots are pinned`);
    }
    this.pinned.add(adapter);
    this.resident.set(adapter, true);
  }

  /**
   * Move one request of `adapter` from waiting to running, making it resident.
   * Returns true if the adapter had to be loaded into a slot.
   */
  admit(adapter: string, maxLoras: number): boolean {
    dec(this.waiting, adapter);
    inc(this.running, adapter);
    const loaded = !this.resident.delete(adapter);
    if (loaded) {
      for (const a of this.resident.keys()) {
        if (this.resident.size < maxLoras) break;
        if (!this.running.has(a) && !this.pinned.has(a)) this.resident.delete(a);
      }
    }
    this.resident.set(adapter, true);
    return loaded;
  }

  /** A running request of `adapter` was preempted back to the queue. */
  requeue(adapter: string): void {
    dec(this.running, adapter);
    inc(this.waiting, adapter);
  }

  enqueue(adapter: string): void {
    inc(this.waiting, adapter);
  }

  leave(adapter: string, wasRunning: boolean): void {
    dec(wasRunning ? this.running : this.waiting, adapter);
  }

  runningAdapters(): string[] {
    return [...this.running.keys()];
  }

  waitingAdapters(): string[] {
    return [...this.waiting.keys()];
  }

  residentAdapters(): string[] {
    return [...this.resident.keys()];
  }

  pinnedAdapters(): string[] {
    return [...this.pinned];
  }
}

function inc(m: Map<string, number>, k: string): void {
  m.set(k, (m.get(k) ?? 0) + 1);
}

function dec(m: Map<string, number>, k: string): void {
  const n = (m.get(k) ?? 0) - 1;
  if (n > 0) m.set(k, n);
  else m.delete(k);
}
