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
 * - queue boards: as built. The link reports its workers' summaries when
 *   they change, the aggregator's merge (host/aggregator/peer-queues.ts)
 *   renumbers their writers and sends each replica the others', and the
 *   link puts them on its shared board (stamped with its clock), which its
 *   workers read on their next tick or held request: one queue order and
 *   one predicted wait across the replicas.
 * - prefix placements: a model (not on the wire yet): the others' records
 *   are appended to the replica's prefix log, which its workers replay on
 *   their next tick as they replay each other's. Layout:
 *   assembly/core/prefix/prefix-log.ts.
 */
import { PeerLoadMerge } from "../../host/aggregator/peer-load.js";
import { PeerQueueMerge } from "../../host/aggregator/peer-queues.js";
import type { NativeRouter } from "../../testing/native/router.js";
import type { NativeSharedData } from "../../testing/native/shared-data.js";
import type { ControlPlaneMerge, StateSharing } from "./state-sharing.js";

const LOG_SLOTS = 512;
/** As the filter's link (gateway/peer-queues.ts): the board drops a summary not renewed within 1 s. */
const QUEUE_RENEW_MS = 500;
const RECORD_BYTES = 104;
const LOG_HEADER = 8;
const LOG_BYTES = LOG_HEADER + LOG_SLOTS * RECORD_BYTES;

/** The records written to a prefix log from `from` on (at most the ring's worth), with their sequence numbers. */
function recordsSince(log: Uint8Array, from: number): { records: Uint8Array[]; written: number } {
  if (log.byteLength !== LOG_BYTES) return { records: [], written: 0 };
  const written = Number(new DataView(log.buffer, log.byteOffset).getBigUint64(0, true));
  const records: Uint8Array[] = [];
  for (let seq = Math.max(from, written - LOG_SLOTS); seq < written; seq++) {
    const at = LOG_HEADER + (seq % LOG_SLOTS) * RECORD_BYTES;
    records.push(log.slice(at, at + RECORD_BYTES));
  }
  return { records, written };
}

/** The log with `records` appended (a new log when there was none); returns it and the sequence number of the first appended. */
function appendRecords(log: Uint8Array, records: readonly Uint8Array[]): { log: Uint8Array; first: number } {
  const out = log.byteLength === LOG_BYTES ? log.slice() : new Uint8Array(LOG_BYTES);
  const view = new DataView(out.buffer);
  const first = Number(view.getBigUint64(0, true));
  records.forEach((r, i) => out.set(r, LOG_HEADER + ((first + i) % LOG_SLOTS) * RECORD_BYTES));
  view.setBigUint64(0, BigInt(first + records.length), true);
  return { log: out, first };
}

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

  // Sequence ranges of the log that hold the others' records: never reported back.
  const foreign: Array<[number, number]> = [];
  let reported = 0;
  sharing.join<Uint8Array[]>("prefix", replica, {
    report() {
      const { records, written } = recordsSince(shared.prefixLog, reported);
      const start = written - records.length;
      reported = written;
      return records.filter((_, i) => !foreign.some(([a, b]) => start + i >= a && start + i < b));
    },
    receive(reports) {
      const records = reports.flat();
      if (records.length === 0) return;
      const { log, first } = appendRecords(shared.prefixLog, records);
      shared.prefixLog = log;
      foreign.push([first, first + records.length]);
      // Ranges the ring has overwritten can no longer be reported.
      while (foreign.length > 0 && foreign[0][1] <= first + records.length - LOG_SLOTS) foreign.shift();
    },
  });
}
