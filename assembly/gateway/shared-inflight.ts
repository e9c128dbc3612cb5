// The in-flight table (core/fleet/inflight.ts) in one shared-data key, so every
// worker counts every worker's requests. A decision reads it once, the router
// adds the request to it, and one compare-and-swap write publishes it; if
// another worker wrote in between, the table is re-read and only this
// request's change re-applied (the decision itself stands).
//
// A request's end releases its count at no host call: the release waits
// here, this worker's own reads see it at once, and it is published with
// this worker's next write (its next routed request, or a stream's first
// bytes) or, at the latest, on its next tick (flush). Other workers see it
// that late; the native build models the same (assembly/native/instance.ts). A
// stream's first bytes (its prefill done) are published at once: a pod's
// prefill backlog seen late by the others steers their picks away from it
// (the simulator's prefix and mixed-fleet scenarios showed it).
import { utf8 } from "../abi/hostcalls";
import { InflightTable } from "../core/fleet/inflight";
import { SharedValue } from "./shared-value";

/** The shared-data key of the workers' in-flight table. */
export const INFLIGHT_KEY: ArrayBuffer = utf8("llm_gateway.inflight");

// The other Envoy replicas' in flight, as the link (gateway/peer-share.ts)
// last published it from the aggregator's fan-out; a worker loads it into the
// table's peers part (InflightTable.decodePeers) on the tick whose snapshot
// cell shows a new one, so an idle tick costs no call for it.
export const PEERS_KEY: ArrayBuffer = utf8("llm_gateway.peers_inflight");

// Workers rarely collide; a bounded loop keeps a pathological case cheap.
const CAS_ATTEMPTS = 8;

export class SharedInflight {
  readonly table: InflightTable = new InflightTable();
  private value: SharedValue = new SharedValue(INFLIGHT_KEY);
  private peers: SharedValue = new SharedValue(PEERS_KEY);
  /** The link's count of peers' tables published, as loaded last. */
  private peersLoaded: u64 = 0;
  private out: ArrayBuffer = new ArrayBuffer(256);
  /** This worker's changes not yet published, in order; arrays kept from one flush to the next. */
  private pendingHashes: u64[] = [];
  private pendingChanges: i32[] = [];

  /** Loads the shared table into `table` (empty if absent or unreadable), with this worker's unpublished changes. */
  read(): void {
    const v = this.value;
    if (v.read()) {
      // Bytes this code did not write are dropped: the next write replaces them.
      this.table.decode(v.bytes.ptr, v.bytes.len);
      v.bytes.release();
    } else {
      this.table.clear();
    }
    const hashes = this.pendingHashes;
    const changes = this.pendingChanges;
    for (let i = 0; i < hashes.length; i++) {
      this.table.add(unchecked(hashes[i]), unchecked(changes[i * 3]), unchecked(changes[i * 3 + 1]), unchecked(changes[i * 3 + 2]));
    }
  }

  /**
   * Publishes `table` after the caller made this change (InflightTable.add)
   * to what read() loaded. A change that cannot be written (contention
   * beyond reason) waits with the unpublished ones.
   */
  commit(hash: u64, delta: i32, streams: i32 = 0, tokens: i32 = 0): void {
    if (!this.publish(hash, delta, streams, tokens)) this.defer(hash, delta, streams, tokens);
  }

  /** read(), add, commit: a change made outside a decision that the others must see at once (a stream's first bytes). */
  add(hash: u64, delta: i32, streams: i32 = 0, tokens: i32 = 0): void {
    this.read();
    this.table.add(hash, delta, streams, tokens);
    this.commit(hash, delta, streams, tokens);
  }

  /** A change the others may see late (a request's end): published with this worker's next write. */
  defer(hash: u64, delta: i32, streams: i32 = 0, tokens: i32 = 0): void {
    this.pendingHashes.push(hash);
    this.pendingChanges.push(delta);
    this.pendingChanges.push(streams);
    this.pendingChanges.push(tokens);
  }

  /** Loads the peers' in flight into the table when the link published a new one (`published`: the snapshot cell's count). */
  loadPeers(published: u64): void {
    if (published == this.peersLoaded) return;
    this.peersLoaded = published;
    const v = this.peers;
    if (v.read()) {
      // Bytes this code did not write leave no peers.
      this.table.decodePeers(v.bytes.ptr, v.bytes.len);
      v.bytes.release();
    } else {
      this.table.decodePeers(0, 0);
    }
  }

  /** Publishes the unpublished changes, if any (a read and a write): on the tick, so others see them within one. */
  flush(): void {
    if (this.pendingHashes.length == 0) return;
    this.read();
    this.publish(0, 0);
  }

  /** Writes `table`, re-reading and re-applying the change (none: all 0) while another worker came first. */
  private publish(hash: u64, delta: i32, streams: i32 = 0, tokens: i32 = 0): bool {
    for (let i = 0; i < CAS_ATTEMPTS; i++) {
      if (this.write()) {
        // Published with the table: read() applied them.
        this.pendingHashes.length = 0;
        this.pendingChanges.length = 0;
        return true;
      }
      this.read();
      if (delta != 0 || streams != 0 || tokens != 0) this.table.add(hash, delta, streams, tokens);
    }
    return false;
  }

  private write(): bool {
    const len = this.table.encodedLength();
    if (this.out.byteLength < len) this.out = new ArrayBuffer(len * 2);
    const ptr = changetype<usize>(this.out);
    this.table.encodeInto(ptr);
    return this.value.write(ptr, len);
  }
}
