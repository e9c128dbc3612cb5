// The link's side (gateway/link.ts, Envoy's singleton service) for the native
// build: an instance used for it plays that VM, whatever its router does.
import { PeerLoad, ReportEncoder } from "../core/fleet/peer-load";
import { InflightTable } from "../core/fleet/inflight";
import { QueueShare } from "../core/queueing/peer-queues";
import { ProtoWriter } from "../core/wire/proto";
import { appendRecords, LOG_BYTES } from "../core/prefix/prefix-log";
import { LINK_WRITER, PrefixRecordBatch, PrefixShareReporter } from "../core/prefix/prefix-share";
import { nowMs } from "./instance";

let linkReports = new ReportEncoder();
let linkPeers = new PeerLoad();
const linkOwn = new InflightTable();

/** A report on the stream: the entries of the shared table (this gateway's own) changed since the last one. */
export function linkReport(table: Uint8Array): Uint8Array {
  if (!linkOwn.decode(table.dataStart, table.byteLength)) linkOwn.clear();
  const out = new ProtoWriter();
  linkReports.encode(linkOwn, out);
  return Uint8Array.wrap(out.finish());
}

/** A fan-out received: the peers' table to publish to the workers, or an empty array if it did not decode (the link then drops the stream). */
export function linkReceive(fanout: Uint8Array): Uint8Array {
  if (!linkPeers.apply(fanout.dataStart, fanout.byteLength)) return new Uint8Array(0);
  const sum = linkPeers.sum;
  const out = new Uint8Array(sum.encodedLength());
  sum.encodeInto(out.dataStart);
  return out;
}

/** A new stream: the next report is whole, no peers known. */
export function linkReset(): void {
  linkReports = new ReportEncoder();
  linkPeers = new PeerLoad();
  linkQueues.reset();
}

const linkQueues = new QueueShare();

/** The link's queue report from the shared board's bytes (Hello.queues), or an empty array when it has not changed. */
export function linkQueueReport(board: Uint8Array): Uint8Array {
  const report = linkQueues.report(board.dataStart, board.byteLength);
  return report == null ? new Uint8Array(0) : Uint8Array.wrap(report);
}

/** The shared board with a fan-out's peer_queues adopted (stamped now), or an empty array when those are not a board. */
export function linkQueueAdopt(board: Uint8Array, peers: Uint8Array): Uint8Array {
  const merged = linkQueues.merge(board.dataStart, board.byteLength, peers.dataStart, peers.byteLength, nowMs);
  return merged == null ? new Uint8Array(0) : Uint8Array.wrap(merged);
}

// The link's share of prefix placements (gateway/peer-prefix.ts): its
// reporter's place in the log outlives a stream, as the link's does.
const linkPrefixReporter = new PrefixShareReporter();
const linkPrefixBatch = new PrefixRecordBatch();

/** The records to report (Hello.prefix_records): the log's since the last call, except the link's own. */
export function linkPrefixReport(log: Uint8Array): Uint8Array {
  const out = new ProtoWriter();
  linkPrefixReporter.encode(log.dataStart, log.byteLength, LINK_WRITER, out);
  return Uint8Array.wrap(out.finish());
}

/** The log with a fan-out's peer_prefix_records appended under the link's writer id, or an empty array if they do not decode. */
export function linkPrefixApply(log: Uint8Array, records: Uint8Array): Uint8Array {
  if (!linkPrefixBatch.decode(records.dataStart, records.byteLength)) return new Uint8Array(0);
  const out = new Uint8Array(LOG_BYTES);
  const whole = log.byteLength == LOG_BYTES;
  if (whole) memory.copy(out.dataStart, log.dataStart, <usize>LOG_BYTES);
  appendRecords(out.dataStart, whole ? LOG_BYTES : 0, linkPrefixBatch.decisions, linkPrefixBatch.count, LINK_WRITER);
  return out;
}
