// Carries out the schedule's events on the running stack and records when
// each happened (on the load's clock), which pod it hit, and how long it
// took. A kill picks the pool's pod holding the most requests, so a crash
// always has work to cut; a leave drains: the pod leaves the pool, and is
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
  /** A kill: requests the pod's engine held just before. */
  requestsHeld?: number;
}

const DRAIN_TIMEOUT_MS = 30_000;
const POLL_MS = 100;

export class EventRunner {
  readonly events: SoakEvent[] = [];
  readonly kills: Kill[] = [];
  /** Killed and not restored yet, by pool. */
  private readonly down = new Map<string, PodProcess>();

  constructor(
    private readonly stack: SoakStack,
    private readonly clock: () => number,
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
        const { pod, held } = await this.busiest(e.pool);
        const killMs = this.clock();
        await pod.crash();
        this.kills.push({ pod: pod.name, atMs: killMs });
        this.down.set(e.pool, pod);
        this.events.push({ kind: "kill", pool: e.pool, pod: pod.name, atMs: killMs, doneMs: this.clock(), requestsHeld: held });
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
        const pod = this.oldestUp(e.pool);
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

  private oldestUp(pool: string): PodProcess {
    const pod = this.members(pool).find((p) => p !== this.down.get(pool));
    if (!pod) throw new Error(`leave in ${pool}: no member is up`);
    return pod;
  }

  private async busiest(pool: string): Promise<{ pod: PodProcess; held: number }> {
    let best: { pod: PodProcess; held: number } | null = null;
    for (const pod of this.members(pool)) {
      if (pod === this.down.get(pool)) continue;
      const held = await pod.requestsHeld();
      if (!best || held > best.held) best = { pod, held };
    }
    if (!best) throw new Error(`kill in ${pool}: no member is up`);
    return best;
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
