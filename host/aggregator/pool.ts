// One pool as the aggregator runs it: its config, the discovery source its
// pods come from, and the pods (by address, in the order the source gave
// them). The state is made from a source, so a pool's source can be replaced
// by replacing its state while the other pools keep running.
import type { PoolConfig } from "../config.js";
import type { DiscoverySource, Target } from "../discovery/source.js";
import { Pod } from "./pod.js";

export class PoolState {
  private members = new Map<string, Pod>();
  /** The pod set changed since the last cycle's end: Envoy's endpoints and the snapshot must follow. */
  membersChanged = false;
  /** The failing pods as failingChanged last saw them. */
  private failingKey = "";

  constructor(
    private current: PoolConfig,
    readonly source: DiscoverySource,
  ) {}

  get config(): PoolConfig {
    return this.current;
  }

  /** A reload that leaves the pool's discovery alone hands it the new config (weights, adapters, batch slots, ...). */
  reconfigure(config: PoolConfig, now: number): void {
    this.current = config;
    for (const pod of this.members.values()) {
      pod.setBatchSlots(config.batchSlots, now);
      pod.setTls(config.tls);
    }
  }

  get name(): string {
    return this.config.name;
  }

  get pods(): IterableIterator<Pod> {
    return this.members.values();
  }

  get size(): number {
    return this.members.size;
  }

  /** Whether `pod` is (still) one of this pool's. */
  has(pod: Pod): boolean {
    return this.members.get(pod.address) === pod;
  }

  /** The pool's complete target set from its source: new pods start being scraped at the next cycle, gone ones stop now. */
  setTargets(targets: readonly Target[], now: number): void {
    const before = this.members;
    const next = new Map<string, Pod>();
    for (const t of targets) {
      if (next.has(t.address)) continue;
      const pod = before.get(t.address);
      if (pod && pod.target.hostHeader === t.hostHeader) {
        if (pod.target.capacity !== t.capacity || pod.target.name !== t.name) pod.retarget(t, now);
        next.set(t.address, pod);
      } else {
        next.set(t.address, new Pod(t, this.config.engine, this.config.batchSlots, this.config.tls));
      }
    }
    for (const [address, pod] of before) if (next.get(address) !== pod) pod.close();
    const order = (m: Map<string, Pod>) => [...m.values()];
    const [a, b] = [order(before), order(next)];
    if (a.length !== b.length || a.some((pod, i) => pod !== b[i])) this.membersChanged = true;
    this.members = next;
  }

  /** The pods' ip:port literals: the pool's endpoints for Envoy. */
  addresses(): string[] {
    return [...this.members.keys()];
  }

  /** The pods whose entries are not fresh (scrapes failing, or none yet): UNHEALTHY in Envoy's endpoints. */
  failing(): Set<string> {
    const out = new Set<string>();
    for (const pod of this.members.values()) if (!pod.entry.fresh) out.add(pod.address);
    return out;
  }

  /** Whether the failing pods differ from the last call's; cheap when none fail, as it is called every cycle. */
  failingChanged(): boolean {
    const key = [...this.failing()].join(",");
    const changed = key !== this.failingKey;
    this.failingKey = key;
    return changed;
  }

  /** Stops the source and every pod's connection. */
  close(): void {
    this.source.close();
    for (const pod of this.members.values()) pod.close();
  }
}
