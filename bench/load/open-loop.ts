// The open-loop schedule every live load uses: each request leaves at its
// planned time whether or not earlier ones have finished, and requests still
// running `drainLimitMs` after the last one left are aborted (a timeout).
//
// The drain deadline is one AbortController per open request, all aborted by
// one timer, rather than one signal every request listens to: fetch caps a
// shared signal's listeners at 1500 and warns past that, and an overloaded
// run keeps thousands of requests open.

export interface Planned {
  /** Since the start of the load, on `clock`. */
  atMs: number;
}

export interface OpenLoopOptions {
  /** Milliseconds since the start of the load; shared with whoever injects faults. */
  clock: () => number;
  drainLimitMs: number;
  /** Checked before each request: true stops sending (those sent still run). */
  stopped?: () => boolean;
}

class Deadline {
  private readonly open = new Set<AbortController>();
  private passed = false;
  private timer: NodeJS.Timeout | undefined;

  /** A signal aborted at the deadline; `done` once its request no longer needs it. */
  attach(): { signal: AbortSignal; done: () => void } {
    const c = new AbortController();
    if (this.passed) c.abort();
    else this.open.add(c);
    return { signal: c.signal, done: () => this.open.delete(c) };
  }

  arm(ms: number): void {
    this.timer = setTimeout(() => {
      this.passed = true;
      for (const c of this.open) c.abort();
      this.open.clear();
    }, ms);
  }

  clear(): void {
    clearTimeout(this.timer);
  }
}

/** Sends every planned request at its time with `send`, then waits for them all (or the drain deadline). */
export async function openLoop<P extends Planned>(
  plan: Iterable<P>,
  send: (planned: P, signal: AbortSignal) => Promise<void>,
  opts: OpenLoopOptions,
): Promise<void> {
  const deadline = new Deadline();
  const pending: Array<Promise<void>> = [];
  try {
    for (const planned of plan) {
      if (opts.stopped?.()) break;
      const wait = planned.atMs - opts.clock();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      const { signal, done } = deadline.attach();
      pending.push(send(planned, signal).finally(done));
    }
    deadline.arm(opts.drainLimitMs);
    await Promise.all(pending);
  } finally {
    deadline.clear();
  }
}
