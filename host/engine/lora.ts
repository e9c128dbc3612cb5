/**
 * LoRA adapter bookkeeping. `maxLoras` bounds the distinct adapters in the
 * running batch and the adapters resident in GPU slots; a resident adapter
 * with no running request can be evicted (least recently admitted first) to
 * make room. Running/waiting counts back vLLM's lora_requests_info gauge.
 */
export class LoraTracker {
  /** Resident adapters; Map insertion order is recency (oldest first). */
  private readonly resident = new Map<string, true>();
  private readonly running = new Map<string, number>();
  private readonly waiting = new Map<string, number>();

  /** True if a request for `adapter` may join the running batch now. */
  canRun(adapter: string, maxLoras: number): boolean {
    return this.running.has(adapter) || this.running.size < maxLoras;
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
        if (!this.running.has(a)) this.resident.delete(a);
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
}

function inc(m: Map<string, number>, k: string): void {
  m.set(k, (m.get(k) ?? 0) + 1);
}

function dec(m: Map<string, number>, k: string): void {
  const n = (m.get(k) ?? 0) - 1;
  if (n > 0) m.set(k, n);
  else m.delete(k);
}
