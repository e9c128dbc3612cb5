import { Endpoint, Pool } from "../../fleet/snapshot";
import { DecisionLog } from "../../prefix/decision-log";
import { PrefixIndex } from "../../prefix/prefix-index";
import { PrefixMatch } from "../../prefix/prefix-match";
import { BLOCK_BYTES } from "../../prefix/prefix-keys";
import { predictedWait } from "../queue/queue";
import { RouteRequest } from "../route-request";
import { Scorer } from "../scorer";

const BOUND: f64 = 3;
/**
 * For a prompt no pod holds, the pod whose modelled cache has taken in the
 * fewest blocks gets up to this much: a near tie on load then
 * puts a new prefix where it evicts least, so cold prefixes spread over the
 * pods instead of piling where a tie-break happens to fall (on real
 * llama.cpp pods, whose cache is a few slots, piling evicts them at once).
 * Far below any load difference a request makes.
 */
const COLD_SPREAD: f64 = 0.001;

/**
 * Prefix-cache affinity: the share of the prompt a pod probably holds in its
 * KV cache, learned from where earlier requests with the same leading blocks
 * were sent (core/prefix/prefix-index.ts, shared by all workers):
 *
 *   score_i = bytes of the prompt's longest prefix held by pod i / prompt bytes
 *             if wait_i <= BOUND * min_j wait_j + 2, else 0
 *   score_i = COLD_SPREAD * (1 - blocks written to i / most written to any)
 *             when no pod holds any of it and none reports its KV size
 *
 * with wait the queue scorer's predicted wait (requests ahead over relative
 * speed). The bound is where a hit stops saving more than the wait it costs:
 * a holder whose queue has grown past it loses its claim, the next request
 * goes where the load scorers say, and that pod learns the prefix too. So a
 * hot prefix spreads over as many pods as its traffic needs, and once every
 * pod holds it they all score alike and load alone decides (consistent
 * hashing with bounded loads). Within the bound the saving wins: a cache hit
 * on a long prompt is worth more than a queued request or two. (Bounds that
 * shrink with the share held, or that also cap the batch, were tried on the
 * simulator: they cost the mixed fleet 45% at p95.)
 *
 * After a pick it records the prompt's blocks as cached on the chosen pod
 * (the part it did not hold yet is what the pod's cache takes in), and sets
 * request.cachedBytes to what the pod probably held already.
 */
export class PrefixScorer extends Scorer {
  /** Matched keys per pool slot for request `matchedFor` (RouteRequest.serial): nominated, scored and recorded from one match. */
  private matched: PrefixMatch = new PrefixMatch();
  private matchedFor: u32 = 0;

  constructor(private index: PrefixIndex) {
    super("prefix", true, true);
  }

  score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void {
    const n = candidates.length;
    const keys = request.prefix;
    if (keys.count == 0) {
      for (let i = 0; i < n; i++) unchecked(out[i] = 0);
      return;
    }
    if (this.matchedFor != request.serial) this.match(request);
    let least = f64.MAX_VALUE;
    for (let i = 0; i < n; i++) least = min(least, predictedWait(unchecked(candidates[i]), request, i));
    const bound = BOUND * least + 2;
    const total = <f64>keys.promptBytes;
    let anyHeld = false;
    for (let i = 0; i < n; i++) {
      const e = unchecked(candidates[i]);
      const held = <f64>keys.coveredBytes(this.matched.of(e.slot)) / total;
      anyHeld = anyHeld || held > 0;
      unchecked(out[i] = held > 0 && predictedWait(e, request, i) <= bound ? held : 0);
    }
    if (!anyHeld && cacheSizesUnknown(candidates)) spreadCold(candidates, out);
  }

  record(primary: Endpoint, request: RouteRequest, log: DecisionLog): void {
    const keys = request.prefix;
    if (keys.count == 0) return;
    // A lone candidate is picked without scoring: match here then.
    if (this.matchedFor != request.serial) this.match(request);
    const promptBlocks = (keys.promptBytes + BLOCK_BYTES - 1) / BLOCK_BYTES;
    const cachedBlocks = keys.coveredBytes(this.matched.of(primary.slot)) / BLOCK_BYTES;
    const d = log.next();
    d.endpoint = primary.addressHash;
    d.newBlocks = <u32>(promptBlocks - cachedBlocks);
    d.count = keys.count;
    for (let k = 0; k < keys.count; k++) unchecked(d.keys[k] = keys.keys[k]);
    log.record(d);
    request.cachedBytes = cachedBlocks * BLOCK_BYTES;
  }

  /** The pods that hold more of the prompt than every pod does. */
  nominate(pool: Pool, request: RouteRequest, out: i32[]): void {
    if (request.prefix.count == 0) return;
    if (this.matchedFor != request.serial) this.match(request);
    const deeper = this.matched.deeper;
    for (let i = 0; i < deeper.length; i++) {
      const slot = unchecked(deeper[i]);
      if (this.matched.of(slot) > this.matched.common) out.push(slot);
    }
  }

  private match(request: RouteRequest): void {
    this.index.match(request.prefix, request.pool, this.matched);
    this.matchedFor = request.serial;
  }
}

/**
 * Where pods report their KV size the modelled caches evict as theirs do,
 * and random ties place new prompts better (on the simulator's shared-prefix,
 * spreading cost 10% at p95); where none does, nothing models the eviction
 * that piling causes.
 */
function cacheSizesUnknown(candidates: Endpoint[]): bool {
  for (let i = 0; i < candidates.length; i++) if (unchecked(candidates[i]).kvTokens > 0) return false;
  return true;
}

/** A prompt nobody holds: the pods whose modelled caches took in fewer blocks score a little higher. */
function spreadCold(candidates: Endpoint[], out: StaticArray<f64>): void {
  const n = candidates.length;
  let written: u64 = 1;
  for (let i = 0; i < n; i++) written = max(written, blocksWritten(unchecked(candidates[i])));
  for (let i = 0; i < n; i++) unchecked(out[i] = COLD_SPREAD * (1 - <f64>blocksWritten(unchecked(candidates[i])) / <f64>written));
}

function blocksWritten(e: Endpoint): u64 {
  const cache = e.prefixCache;
  return cache == null ? 0 : cache.clock;
}
