// Which LoRA adapters a pod probably still holds in its GPU slots, learned
// from where this gateway sent them (every worker's placements, and the
// replicas' through the control plane: they travel in the prefix log). The
// engines' metrics cannot tell: vLLM lists an adapter only while requests for
// it are in flight (vllm/v1/metrics/stats.py LoRARequestStates), yet keeps up
// to max_loras adapters loaded and evicts the least recently used one to load
// another (vllm/lora/model_manager.py, models.py before:
// LRUCacheLoRAModelManager's active adapters, an LRU of max_loras slots;
// vllm/lora/worker_manager.py LRUCacheWorkerLoRAManager). So an adapter
// placed on a pod is probably still loaded there while fewer than max_lora
// other adapters were placed there since: each pod's memory is an LRU of
// adapter placements, as deep as its max_lora at the time it is asked.
//
// Fixed memory: per pod its most recent distinct adapters (pod-adapters.ts); per
// adapter the HOLDERS pods it was last placed on (to nominate them in a
// pool too large to score whole), for at most MAX_ADAPTERS adapters.
import { PodAdapters, toFront } from "./pod-adapters";
import { Pool, retainCurrent, Snapshot } from "./snapshot";

/** Pods remembered per adapter, most recent first. */
const HOLDERS: i32 = 8;
/** Adapters with a holder list; past it the lists start over (they only nominate: residency is per pod). */
const MAX_ADAPTERS: i32 = 4096;

export class AdapterSlots {
  /** Per endpoint (by address hash): its placements. */
  private pods: Map<u64, PodAdapters> = new Map();
  /** Per adapter hash: the pods it was placed on, most recent first, 0 for none. */
  private holders: Map<u64, StaticArray<u64>> = new Map();

  /** An endpoint's placements, kept on the decoded endpoint so scoring needs no lookup. */
  attach(endpoint: u64): PodAdapters {
    if (this.pods.has(endpoint)) return this.pods.get(endpoint);
    const p = new PodAdapters();
    this.pods.set(endpoint, p);
    return p;
  }

  /** `adapter` (its name's hash) was sent to `endpoint`. */
  place(endpoint: u64, adapter: u64): void {
    this.attach(endpoint).touch(adapter);
    let list: StaticArray<u64>;
    if (this.holders.has(adapter)) {
      list = this.holders.get(adapter);
    } else {
      if (this.holders.size >= MAX_ADAPTERS) this.holders.clear();
      list = new StaticArray<u64>(HOLDERS);
      this.holders.set(adapter, list);
    }
    let n = 0;
    while (n < HOLDERS && unchecked(list[n]) != 0) n++;
    toFront(list, n, endpoint);
  }

  /** The slots in `pool` of the pods that probably hold `adapter` (at most HOLDERS), appended to `out`. */
  holdersIn(adapter: u64, pool: Pool, out: i32[]): void {
    if (!this.holders.has(adapter)) return;
    const list = this.holders.get(adapter);
    for (let h = 0; h < HOLDERS; h++) {
      const e = unchecked(list[h]);
      if (e == 0) return;
      const s = pool.slots.get(e);
      if (s < 0) continue;
      const pod = unchecked(pool.endpoints[s]);
      const placed = pod.placedAdapters;
      if (placed != null && placed.holds(adapter, pod.maxLora)) out.push(s);
    }
  }

  /** Forgets departed pods once they outnumber the snapshot's (snapshot.ts retainCurrent). */
  retainOnly(snap: Snapshot): void {
    this.pods = retainCurrent(this.pods, snap);
  }
}
