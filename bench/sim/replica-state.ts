/**
 * What one replica of our gateway tells the others through the control
 * plane: its requests in flight per pod, the prefix placements its
 * workers recorded and what they hold; the control plane tells it its
 * place among them.
 *
 * - in flight: as built. The replica's link (an instance of the routing
 *   core playing the filter's singleton service, gateway/link.ts) reports
 *   the entries of its shared table changed since its last report, the
 *   aggregator's own merge (host/aggregator/peer-load.ts) sums the others'
 *   and sends each replica what changed of it, the link publishes that as
 *   the peers' table, and every worker loads it on its tick
 *   (InflightTable.decodePeers): its picks count the others' load, its
 *   releases touch its own only.
 * - queue boards: as built. The link reports its workers' summaries when
 *   they change, the aggregator's merge (host/aggregator/peer-queues.ts)
 *   renumbers their writers and sends each replica the others', and the
 *   link puts them on its shared board (stamped with its clock), which its
 *   workers read on their next tick or held request: one queue order and
 *   one predicted wait across the replicas.
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
import { PeerQueueMerge } from "../../host/aggregator/peer-queues.js";
import type { NativeRouter } from "../../testing/native/router.js";
import type { NativeSharedData } from "../../testing/native/shared-data.js";
import type { ControlPlaneMerge, StateSharing } from "./state-sharing.js";

/** As the filter's link (gateway/peer-queues.ts): the board drops a summary not renewed within 1 s. */
const QUEUE_RENEW_MS = 500;

/** What a fan-out message carries: the changes of the others' sum, and the replica's place among those sharing. */
interface FanOut {
  inflight: Uint8Array;
  place: { index: number; count: number };
}

/** A merge that sends per round (the aggregator's in-flight and prefix merges): every report taken, then one round for all the fan-outs. */
interface RoundMerge {
  take(envoy: string, report: Uint8Array): void;
  round(): Map<string, Uint8Array>;
}

/** `merge` as one round of the sharing sees it, each replica's fan-out made of the round's bytes for it by `fanOut`. */
function byRound<M extends RoundMerge, F>(merge: M, fanOut: (bytes: Uint8Array, key: string, merge: M) => F): ControlPlaneMerge<Uint8Array, F> {
  let round: Map<string, Uint8Array> | undefined;
  return {
    take(replica, report) {
      round = undefined;
      merge.take(String(replica), report);
    },
    fanOut(replica) {
      round ??= merge.round();
      const key = String(replica);
      return fanOut(round.get(key) ?? new Uint8Array(0), key, merge);
    },
  };
}

const aggregatorMerge = () =>
  byRound(new PeerLoadMerge(), (inflight, key, merge): FanOut => ({ inflight, place: merge.placeOf(key) ?? { index: 0, count: 0 } }));
const aggregatorPrefixMerge = () => byRound(new PeerPrefixMerge(), (records) => records);

/** The aggregator's merge of the replicas' queue boards: a report only when one changed. */
function queueMerge(): ControlPlaneMerge<Uint8Array | null, Uint8Array | undefined> {
  const merge = new PeerQueueMerge();
  return {
    take(replica, report) {
      if (report) merge.take(String(replica), report);
    },
    fanOut: (replica) => merge.fanOut(String(replica)),
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

  // The others' summaries, as last sent; the link renews them on the board as the filter's does.
  let peerQueues: Uint8Array | undefined;
  let renewAtMs = 0;
  sharing.join<Uint8Array | null, Uint8Array | undefined>("queues", replica, {
    report: () => link.linkQueueReport(shared.board),
    receive(peers, t) {
      if (peers) peerQueues = peers;
      if (!peerQueues || (!peers && t < renewAtMs)) return;
      link.setClock(Math.floor(t), Math.floor(t));
      shared.board = link.linkQueueAdopt(shared.board, peerQueues);
      renewAtMs = t + QUEUE_RENEW_MS;
    },
  }, queueMerge);

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
