// A worker's view of the fleet: the snapshot it routes on, when the
// aggregator was last heard from, and, per endpoint, how many of this
// gateway's requests were in flight when that snapshot was installed. The
// filter feeds it from shared data on its refresh tick, the native build from
// its caller; both run this code, so the simulator refreshes as Envoy does.
//
// Why the in-flight baseline: a scrape already counts the requests that were
// on the pod when it was taken. What it cannot show is what happened since:
// requests sent (which queue first) and requests finished. Scorers therefore
// read `scraped + (in flight now - in flight at install)`: a request sent
// after the snapshot counts once, and when it finishes it stops counting, so
// with steady metrics (the aggregator pushes only on change) the estimate
// cannot drift. Installing is the closest point to the scrape a worker sees.
// Installing also sizes each endpoint's modelled cache in the prefix index
// from the KV capacity its engine reports, and carries canary splits'
// positions over from the snapshot it replaces.
import { carrySplits } from "./canary";
import { HealthLedger } from "../fleet/health";
import { InflightTable } from "../fleet/inflight";
import { PrefixIndex } from "../prefix/prefix-index";
import { Snapshot } from "../fleet/snapshot";

export class FleetView {
  current: Snapshot | null = null;
  /** When the aggregator was last heard from (snapshot or heartbeat); 0 = never. */
  heardMs: u64 = 0;
  private version: u64 = 0;

  /** Records the published cell; true when a snapshot with this version should be installed. */
  offer(version: u64, heardMs: u64): bool {
    this.heardMs = heardMs;
    return this.current == null || version != this.version;
  }

  install(snap: Snapshot, version: u64, inflight: InflightTable, health: HealthLedger, prefixes: PrefixIndex): void {
    const previous = this.current;
    if (previous != null) carrySplits(previous, snap);
    this.current = snap;
    this.version = version;
    health.applyTo(snap);
    for (let p = 0; p < snap.pools.length; p++) {
      const endpoints = snap.pools[p].endpoints;
      for (let i = 0; i < endpoints.length; i++) {
        const e = unchecked(endpoints[i]);
        e.inflightBase = inflight.get(e.addressHash);
        e.inflight = e.inflightBase;
        e.prefilling = inflight.prefillingOf(e.addressHash);
        e.prefillTokens = inflight.prefillTokensOf(e.addressHash);
        e.prefixCache = prefixes.attach(e.addressHash, e.kvTokens);
        e.placedAdapters = prefixes.adapters.attach(e.addressHash);
      }
    }
    prefixes.retainOnly(snap);
  }
}
