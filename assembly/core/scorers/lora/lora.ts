import { Endpoint, Pool } from "../../fleet/snapshot";
import { DecisionLog } from "../../prefix/decision-log";
import { PrefixIndex } from "../../prefix/prefix-index";
import { rendezvous } from "../../wire/hash";
import { RouteRequest } from "../route-request";
import { Scorer } from "../scorer";

const RUNNING = 1.0;
const WAITING = 0.8;
/** Placed there among the pod's last max_lora adapters: probably still loaded, though idle (core/fleet/adapter-slots.ts). */
const RESIDENT = 0.9;
const FREE_SLOT = 0.5;
/** Added for the one free-slot candidate the adapter's rendezvous ranking puts first. */
const PLACEMENT = 0.1;
/** An engine that reports no adapter state (TGI loads every adapter at start). */
const UNKNOWN = 0.5;
/** Free-slot pods kept per adapter in rendezvous order: the placement survives this many of them being ejected. */
const PLACEMENTS: i32 = 4;

/**
 * LoRA affinity, for requests naming an adapter (base-model requests score 1
 * everywhere):
 *
 *   1.0  the pod lists the adapter running (vLLM since 0.13 lists every
 *        adapter with a request in flight, queued or running, in both lists)
 *   0.8  it lists requests for it waiting (it is being or will be loaded);
 *        or this gateway placed it there among the pod's last max_lora
 *        adapters (any worker or replica: the placements are shared), and
 *        a slot is free: vLLM keeps that many loaded, least recently used
 *        out first, and lists none that is idle
 *   0.5  a free adapter slot: |running ∪ waiting adapters| < max_lora
 *        (+0.1 for the free-slot pod ranked first for this adapter by
 *        rendezvous hashing of adapter and address, when no pod has it)
 *   0    every slot taken by other adapters: the request would wait for one
 *        to drain, then pay the load
 *   0.5  the engine reports no adapter state (max_lora 0): unknown, neutral
 *
 * The placement bonus makes every worker load a cold adapter on the same pod,
 * instead of each request sent before the next scrape loading it somewhere
 * else; the load scorers still steer it to the pod with most room. A popular
 * adapter stays where it runs until those pods' load outweighs the affinity,
 * so it spreads over as many pods as its traffic needs, not over all of them.
 *
 * After a pick it records the adapter's placement on the chosen pod, which
 * every worker replays (core/prefix/prefix-index.ts): other requests for it
 * follow before a scrape shows it, and after its requests end, while the pod
 * probably still has it loaded.
 */
export class LoraScorer extends Scorer {
  /** Per pool name: the snapshot's pods for each adapter (see nominate), for the pool object they were found in. */
  private pods: Map<string, AdapterPods> = new Map();

  constructor(private index: PrefixIndex) {
    super("lora", false, true);
  }

  /**
   * The pods that run or queue the adapter or probably still hold it, and its
   * first few free-slot pods in rendezvous order (where a cold adapter is
   * placed). What the snapshot shows is looked up once per snapshot.
   */
  nominate(pool: Pool, request: RouteRequest, out: i32[]): void {
    if (request.adapterHash == 0) return;
    const known = this.podsOf(pool).forAdapter(request.model.adapter, request.adapterHash, pool);
    for (let i = 0; i < known.length; i++) out.push(unchecked(known[i]));
    this.index.adapters.holdersIn(request.adapterHash, pool, out);
  }

  private podsOf(pool: Pool): AdapterPods {
    let p = this.pods.has(pool.name) ? this.pods.get(pool.name) : null;
    if (p == null || p.pool != pool) {
      p = new AdapterPods(pool);
      this.pods.set(pool.name, p);
    }
    return p;
  }

  score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void {
    const n = candidates.length;
    const adapter = request.model.adapter;
    if (adapter.length == 0) {
      for (let i = 0; i < n; i++) unchecked(out[i] = 1.0);
      return;
    }
    let placed = -1;
    let placedWeight: u64 = 0;
    let anyHolder = false;
    for (let i = 0; i < n; i++) {
      const e = unchecked(candidates[i]);
      let s = 0.0;
      if (e.maxLora == 0 && e.runningAdapters.length == 0 && e.waitingAdapters.length == 0) s = UNKNOWN;
      else if (e.runningAdapters.includes(adapter)) s = RUNNING;
      else if (e.waitingAdapters.includes(adapter)) s = WAITING;
      else if (busySlots(e) < e.maxLora && placedHere(e, request.adapterHash)) s = RESIDENT;
      else if (busySlots(e) < e.maxLora) {
        s = FREE_SLOT;
        const w = rendezvous(request.adapterHash, e.addressHash);
        if (placed < 0 || w > placedWeight) {
          placed = i;
          placedWeight = w;
        }
      }
      unchecked(out[i] = s);
      if (s > FREE_SLOT) anyHolder = true;
    }
    // Only a cold adapter needs a placement: one already somewhere should go (or spread) from there.
    if (placed >= 0 && !anyHolder) unchecked(out[placed] += PLACEMENT);
  }

  record(primary: Endpoint, request: RouteRequest, log: DecisionLog): void {
    if (request.adapterHash == 0) return;
    const d = log.next();
    d.placeAdapter(primary.addressHash, request.adapterHash);
    log.record(d);
  }
}

/** Whether this gateway placed the adapter on `e` among its last max_lora adapters. */
function placedHere(e: Endpoint, adapterHash: u64): bool {
  const placed = e.placedAdapters;
  return placed != null && placed.holds(adapterHash, e.maxLora);
}

/** For one snapshot's pool: per adapter, the pods nominate() names from the snapshot alone. */
class AdapterPods {
  private byAdapter: Map<u64, i32[]> = new Map();

  constructor(readonly pool: Pool) {}

  forAdapter(adapter: string, adapterHash: u64, pool: Pool): i32[] {
    if (this.byAdapter.has(adapterHash)) return this.byAdapter.get(adapterHash);
    const found: i32[] = [];
    const placed = new StaticArray<i32>(PLACEMENTS);
    const weights = new StaticArray<u64>(PLACEMENTS);
    let kept = 0;
    const endpoints = pool.endpoints;
    for (let i = 0; i < endpoints.length; i++) {
      const e = unchecked(endpoints[i]);
      if (e.runningAdapters.includes(adapter) || e.waitingAdapters.includes(adapter)) {
        found.push(i);
      } else if (busySlots(e) < e.maxLora) {
        // Insert into the few best by rendezvous weight, best first.
        const w = rendezvous(adapterHash, e.addressHash);
        let at = kept < PLACEMENTS ? kept++ : PLACEMENTS;
        while (at > 0 && unchecked(weights[at - 1]) < w) {
          if (at < PLACEMENTS) {
            unchecked(weights[at] = weights[at - 1]);
            unchecked(placed[at] = placed[at - 1]);
          }
          at--;
        }
        if (at < PLACEMENTS) {
          unchecked(weights[at] = w);
          unchecked(placed[at] = i);
        }
      }
    }
    for (let k = 0; k < kept; k++) found.push(unchecked(placed[k]));
    this.byAdapter.set(adapterHash, found);
    return found;
  }
}

/** Adapters holding a slot: running or waiting, counted once. */
function busySlots(e: Endpoint): i32 {
  let n = e.runningAdapters.length;
  for (let i = 0; i < e.waitingAdapters.length; i++) {
    if (!e.runningAdapters.includes(unchecked(e.waitingAdapters[i]))) n++;
  }
  return n;
}
