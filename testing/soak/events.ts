// Carries out the schedule's events on the running stack and records when
// each happened (on the load's clock), which pod it hit, and how long it
// took. A kill waits (a few seconds at most) until a pod of the pool is
// sending a stream, then crashes the pod sending the most (the most requests
// held breaks a tie), so every crash cuts work under way; a leave takes the
// pool's oldest pod but the one this cycle killed (its recovery is watched),
// and drains: the pod leaves the pool, and is
// stopped only once Envoy no longer lists it and its engine holds nothing.
import type { Kill } from "./classify.js";
import type { PodProcess } from "./pods.js";
import type { EventKind, PlannedEvent } from "./schedule.js";
import type { SoakStack } from "./stack.js";

export interface SoakEvent {
  kind: EventKind;
  pool: string;
  pod: string;
  /** Since the start of the load. */
  atMs: number;
  /** When it was complete: the pod restarted, or Envoy listed the new set (a leave: the pod stopped too). */
  doneMs: number;
  /** A kill: streams the pod was sending to the soak's client, and requests its engine held, just before. */
  streamsUnderway?: number;
  requestsHeld?: number;
}

const DRAIN_TIMEOUT_MS = 30_000;
const STREAM_WAIT_MS = 5_000;
const POLL_MS = 100;

export class EventRunner {
  readonly events: SoakEvent[] = [];
  readonly kills: Kill[] = [];
  /** The pod each pool's latest kill hit, restored or not. */
  private readonly killed = new Map<string, PodProcess>();
  /** Killed and not restored yet, by pool. */
  private readonly down = new Map<string, PodProcess>();

  constructor(
    private readonly stack: SoakStack,
    private readonly clock: () => number,
    /** Streams the pod is sending now, as the soak's client sees them. */
    private readonly streamsUnderway: (pod: string) => number,
  ) {}

  /** Runs `planned` in order, each at its time (or at once, when the one before ran late). */
  async run(planned: readonly PlannedEvent[], stopped: () => boolean): Promise<void> {
    for (const e of planned) {
      const wait = e.atMs - this.clock();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      if (stopped()) return;
      await this.carryOut(e);
    }
  }

  private async carryOut(e: PlannedEvent): Promise<void> {
    const atMs = this.clock();
    const record = (pod: PodProcess, extra: Partial<SoakEvent> = {}) =>
      this.events.push({ kind: e.kind, pool: e.pool, pod: pod.name, atMs, doneMs: this.clock(), ...extra });
    switch (e.kind) {
      case "kill": {
        const { pod, streams, held } = await this.busiest(e.pool);
        const killMs = this.clock();
        await pod.crash();
        this.kills.push({ pod: pod.name, atMs: killMs });
        this.down.set(e.pool, pod);
        this.killed.set(e.pool, pod);
        record(pod, { atMs: killMs, streamsUnderway: streams, requestsHeld: held });
        return;
      }
      case "restore": {
        const pod = this.down.get(e.pool);
        if (!pod) throw new Error(`restore in ${e.pool}: no pod of it is down`);
        await pod.start();
        this.down.delete(e.pool);
        record(pod);
        return;
      }
      case "join": {
        const pod = await this.stack.newPod(e.pool);
        await this.stack.membership.join(e.pool, pod.address);
        record(pod);
        return;
      }
      case "leave": {
        const pod = this.leaving(e.pool);
        await this.stack.membership.leave(e.pool, pod.address);
        await this.drained(pod);
        await pod.stop();
        record(pod);
        return;
      }
    }
  }

  private members(pool: string): PodProcess[] {
    const byAddress = new Map([...this.stack.pods.values()].map((p) => [p.address, p]));
    return this.stack.membership.of(pool).map((a) => byAddress.get(a)!);
  }

  private leaving(pool: string): PodProcess {
    const pod = this.members(pool).find((p) => p !== this.killed.get(pool));
    if (!pod) throw new Error(`leave in ${pool}: no member but the one killed`);
    return pod;
  }

  private async busiest(pool: string): Promise<{ pod: PodProcess; streams: number; held: number }> {
    const up = this.members(pool).filter((p) => p !== this.down.get(pool));
    if (up.length === 0) throw new Error(`kill in ${pool}: no member is up`);
    const deadline = Date.now() + STREAM_WAIT_MS;
    for (;;) {
      while (Date.now() < deadline && !up.some((p) => this.streamsUnderway(p.name) > 0)) await new Promise((r) => setTimeout(r, POLL_MS));
      const held = await Promise.all(up.map((pod) => pod.requestsHeld()));
      // Streams counted once the engines answered, and the crash follows at once: a short
      // stream may end while they answer (the longer, the slower the machine).
      let best: { pod: PodProcess; streams: number; held: number } | null = null;
      for (const [i, pod] of up.entries()) {
        const streams = this.streamsUnderway(pod.name);
        if (!best || streams > best.streams || (streams === best.streams && held[i] > best.held)) best = { pod, streams, held: held[i] };
      }
      if (best!.streams > 0 || Date.now() >= deadline) return best!;
    }
  }

  /** Until the pod's engine holds no request: what Envoy sent before it dropped the pod has finished. */
  private async drained(pod: PodProcess): Promise<void> {
    const deadline = Date.now() + DRAIN_TIMEOUT_MS;
    while ((await pod.requestsHeld()) > 0) {
      if (Date.now() > deadline) throw new Error(`pod ${pod.name} still held requests ${DRAIN_TIMEOUT_MS} ms after it left`);
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }
}
