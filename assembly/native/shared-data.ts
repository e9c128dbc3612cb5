// What the filter keeps in Envoy's shared data (the in-flight table, the
// refusal memory, the prefix log, the queue board), handed in and out as
// bytes: a caller running several instances shares them as Envoy would
// between its workers.
import { PrefixDecision } from "../core/prefix/prefix-index";
import { appendRecords, LOG_BYTES } from "../core/prefix/prefix-log";
import { hashBuffer } from "../core/wire/hash";
import { inflight, logReader, nowMs, refusals, router, unpublished, writer } from "./instance";

const scratch = new PrefixDecision();

/**
 * Loads the shared in-flight table (as the filter reads its shared-data key),
 * with this instance's unpublished changes; false if the bytes are not one.
 */
export function setInflight(bytes: Uint8Array): bool {
  const ok = inflight.decode(bytes.dataStart, bytes.byteLength);
  unpublished.applyTo(inflight);
  unpublished.published = false;
  return ok;
}

/** Since setInflight(), this instance wrote the table (a request routed to a pod, a stream's first bytes, a flush): share inflightTable(). */
export function inflightPublished(): bool {
  return unpublished.published;
}

/** The tick's flush: the unpublished changes go out with the table loaded last; false if there were none. */
export function flushInflight(): bool {
  if (unpublished.count == 0) return false;
  unpublished.publish();
  return true;
}

/** The in-flight table after this instance's changes, to share with the others. */
export function inflightTable(): Uint8Array {
  const out = new Uint8Array(inflight.encodedLength());
  inflight.encodeInto(out.dataStart);
  return out;
}

/** Loads the other replicas' in flight (the filter's llm_gateway.peers_inflight key, read on the tick); false if the bytes are not a table. */
export function setPeers(bytes: Uint8Array): bool {
  return inflight.decodePeers(bytes.dataStart, bytes.byteLength);
}

/** This instance's count for `address` in its loaded table. */
export function inflightOf(address: string): i32 {
  return inflight.get(hashBuffer(String.UTF8.encode(address)));
}

/** Loads the shared memory of refused requests (the filter's llm_gateway.refusals key); false if the bytes are not one. */
export function setRefusals(bytes: Uint8Array): bool {
  return refusals.memory.decode(bytes.dataStart, bytes.byteLength);
}

/** The memory of refused requests after this instance's changes, to share with the others. */
export function refusalTable(): Uint8Array {
  const out = new Uint8Array(refusals.memory.encodedLength());
  refusals.memory.encodeInto(out.dataStart);
  return out;
}

/**
 * One refresh tick's exchange of prefix decisions: replays the other
 * instances' records in `log` (empty to start one), appends this instance's
 * new ones and returns the log to share.
 */
export function exchangePrefixLog(log: Uint8Array): Uint8Array {
  logReader.replay(log.dataStart, log.byteLength, writer, router.prefixes, scratch);
  const n = router.drainPending();
  const out = new Uint8Array(LOG_BYTES);
  if (log.byteLength == LOG_BYTES) memory.copy(out.dataStart, log.dataStart, <usize>LOG_BYTES);
  logReader.cursor = appendRecords(out.dataStart, log.byteLength == LOG_BYTES ? LOG_BYTES : 0, router.pendingDecisions, n, writer);
  return out;
}

/** Loads the shared queue board (the filter's llm_gateway.queues key); false if the bytes are not one. */
export function setBoard(bytes: Uint8Array): bool {
  return router.board.decode(bytes.dataStart, bytes.byteLength) || bytes.byteLength == 0;
}

/** The board with this instance's summaries brought up to date, to share with the others. */
export function boardBytes(): Uint8Array {
  router.publish(router.board, nowMs);
  const out = new Uint8Array(router.board.encodedLength());
  router.board.encodeInto(out.dataStart);
  return out;
}
