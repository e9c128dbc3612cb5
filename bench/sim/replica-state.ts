/**
 * What one replica of our gateway tells the others through the control
 * plane: its requests in flight per pod, and the prefix placements its
 * workers recorded; the control plane tells it its place among them.
 *
 * - in flight: as built. The replica's link (an instance of the routing
 *   core playing the filter's singleton service, gateway/link.ts) reports
 *   the entries of its shared table changed since its last report, the
 *   aggregator's own merge (host/aggregator/peer-load.ts) sums the others'
 *   and sends each replica what changed of it, the link publishes that as
 *   the peers' table, and every worker loads it on its tick
 *   (InflightTable.decodePeers): its picks count the others' load, its
 *   releases touch its own only.
 * - prefix placements: as built, the same way. The link reports the
 *   records its workers appended to the replica's prefix log since its last
 *   report (linkPrefixReport), the aggregator's merge
 *   (host/aggregator/peer-prefix.ts) sends each replica the others' records
 *   of the round, and the link appends them to the log under its own writer
 *   id (linkPrefixApply): the workers replay them on their next tick as
 *   they replay each other's. Layout: assembly/core/prefix/prefix-share.ts.
 */
import { PeerLoadMerge } from "../../host/aggregator/peer-load.js";
import { PeerPrefixMerge } from "../../host/aggregator/peer-prefix.js";
import type { NativeRouter } from "../../testing/native/router.js";
import type { NativeSharedData } from "../../testing/native/shared-data.js";
import type { ControlPlaneMerge, StateSharing } from "./state-sharing.js";

/** What a fan-out message carries: the changes of the others' sum, and the replica's place among those sharing. */
interface FanOut {
  inflight: Uint8Array;
  place: { index: number; count: number };
}

/** The aggregator's merge as one round sees it: every report taken, then every fan-out. */
function aggregatorMerge(): ControlPlaneMerge<Uint8Array, FanOut> {
  const merge = new PeerLoadMerge();
  let round: Map<string, Uint8Array> | undefined;
  return {
    take(replica, report) {
      round = undefined;
      merge.take(String(replica), report);
    },
    fanOut(replica) {
      round ??= merge.round();
      const key = String(replica);
      return { inflight: round.get(key) ?? new Uint8Array(0), place: merge.placeOf(key) ?? { index: 0, count: 0 } };
    },
  };
}

/** The aggregator's prefix merge, likewise. */
function aggregatorPrefixMerge(): ControlPlaneMerge<Uint8Array, Uint8Array> {
  const merge = new PeerPrefixMerge();
  let round: Map<string, Uint8Array> | undefined;
  return {
    take(replica, report) {
      round = undefined;
      merge.take(String(replica), report);
    },
    fanOut(replica) {
      round ??= merge.round();
      return round.get(String(replica)) ?? new Uint8Array(0);
    },
  };
}

/** Makes the replica take part in `sharing` through its `link` (nothing happens when it shares nothing). */
export function shareGatewayState(sharing: StateSharing, replica: number, shared: NativeSharedData, link: NativeRouter): void {
  sharing.join<Uint8Array, FanOut>("inflight", replica, {
    // The link reads the shared table, which a worker's release reaches on the worker's next write or tick.
    report: () => link.linkReport(shared.inflight),
    receive({ inflight, place }) {
      shared.place = place;
      if (inflight.byteLength === 0) return;
      const peers = link.linkReceive(inflight);
      if (peers.byteLength === 0) throw new Error("the link rejected a fan-out of the aggregator's merge");
      shared.peers = peers;
    },
  }, aggregatorMerge);

  sharing.join<Uint8Array, Uint8Array>("prefix", replica, {
    report: () => link.linkPrefixReport(shared.prefixLog),
    receive(records) {
      if (records.byteLength === 0) return;
      const log = link.linkPrefixApply(shared.prefixLog, records);
      if (log.byteLength === 0) throw new Error("the link rejected prefix records of the aggregator's merge");
      shared.prefixLog = log;
    },
  }, aggregatorPrefixMerge);
}
