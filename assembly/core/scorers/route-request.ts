// What the scorers may know about the request being routed.
import { Priority } from "../fleet/priority";
import { ModelRoute, Pool, Weights } from "../fleet/snapshot";
import { PrefixKeys } from "../prefix/prefix-keys";

export class RouteRequest {
  /** The model served (a canary target, or what the client asked for). */
  model: ModelRoute = new ModelRoute();
  /** The served model's profile weights. */
  weights: Weights = new Weights();
  priority: Priority = Priority.Standard;
  pool: Pool = new Pool();
  /** Hash of the LoRA adapter name (0 for the base model), for rendezvous placement. */
  adapterHash: u64 = 0;
  /** Block hashes of the prompt's leading bytes, for prefix affinity. */
  prefix: PrefixKeys = new PrefixKeys();
  /** The prompt's size in bytes of its JSON (about 4 per token). */
  promptBytes: i32 = 0;
  /** The client asked for a stream: its first bytes tell when its prefill ended. */
  stream: bool = false;
  /** The prompt's share of an engine's prefill step (core/fleet/snapshot.ts, prefillShare). */
  prefillShare: f64 = 0;
  /** The picker's number for the decision this request is in (unique), so a scorer can tell whether what it kept is this one's. */
  serial: u32 = 0;
  /** Set after the pick by the prefix scorer: the prompt bytes the chosen pod probably held already. */
  cachedBytes: i32 = 0;
  /** The caller's clock, for ejection deadlines and the prefix index's ages. */
  nowMs: u64 = 0;
  /** Per candidate, its capacity relative to the fastest candidate (filled by the picker). */
  capacity: StaticArray<f64> = new StaticArray<f64>(0);

  /** What a held request keeps of the request being routed (its own scratch apart). */
  copyFrom(o: RouteRequest): void {
    this.model = o.model;
    this.weights = o.weights;
    this.priority = o.priority;
    this.pool = o.pool;
    this.adapterHash = o.adapterHash;
    this.prefix.copyFrom(o.prefix);
    this.promptBytes = o.promptBytes;
    this.stream = o.stream;
    this.prefillShare = o.prefillShare;
    this.nowMs = o.nowMs;
  }
}
