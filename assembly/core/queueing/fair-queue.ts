// One class's held requests in one pool, fair between tenants by virtual
// clock: a FIFO per tenant, and each request tagged, when it arrives, with
// max(its arrival, its tenant's previous tag + the pool's time per release);
// the smallest tag goes first. A tenant is so served as if it had the pool
// to itself: a flood's tags run ahead of the clock, and another tenant's
// request, tagged with its arrival, goes before the part of the flood that
// could not have been served by then. Counted by request, not by tokens: a
// pool's requests are alike enough in size that counting them is what keeps
// one tenant's flood from starving another's trickle. A tenant that was idle
// starts at the present, with no credit saved up. Tags are times, so they
// compare across workers (queue-board.ts); with one tenant they are arrival
// order.
import { HeldRequest } from "./held-request";

class Lane {
  head: HeldRequest | null = null;
  tail: HeldRequest | null = null;
  /** The earliest tag this tenant's next request may have. */
  finish: u64 = 0;
  constructor(public tenant: u64) {}
}

export class FairQueue {
  private lanes: Lane[] = [];
  count: i32 = 0;

  /**
   * Queues `h` behind its tenant's earlier requests; `spacingMs` is the
   * pool's time per release now. A retry (`retry`) keeps the tag of its
   * arrival as the router dated it, and goes before its tenant's requests
   * tagged later.
   */
  push(h: HeldRequest, spacingMs: u64, retry: bool = false): void {
    h.next = null;
    const lane = this.laneOf(h.tenant);
    h.tag = retry || lane.finish <= h.arrivalMs ? h.arrivalMs : lane.finish;
    if (h.tag + spacingMs > lane.finish) lane.finish = h.tag + spacingMs;
    this.count++;
    if (lane.tail == null) {
      lane.head = h;
      lane.tail = h;
      return;
    }
    if (lane.tail!.tag <= h.tag) {
      lane.tail!.next = h;
      lane.tail = h;
      return;
    }
    // Only a retry is tagged before the lane's last request.
    if (lane.head!.tag > h.tag) {
      h.next = lane.head;
      lane.head = h;
      return;
    }
    let prev = lane.head!;
    while (prev.next != null && prev.next!.tag <= h.tag) prev = prev.next!;
    h.next = prev.next;
    prev.next = h;
  }

  /** The request served next (smallest tag, then earliest arrival), or null. */
  peek(): HeldRequest | null {
    let best: HeldRequest | null = null;
    for (let i = 0; i < this.lanes.length; i++) {
      const h = unchecked(this.lanes[i]).head!;
      if (best == null || h.tag < best.tag || (h.tag == best.tag && h.arrivalMs < best.arrivalMs)) best = h;
    }
    return best;
  }

  /** Removes `h` from its tenant's lane (released, its client gone, its deadline passed); false if it is not here. */
  remove(h: HeldRequest): bool {
    const lanes = this.lanes;
    for (let i = 0; i < lanes.length; i++) {
      const lane = unchecked(lanes[i]);
      if (lane.tenant != h.tenant) continue;
      let prev: HeldRequest | null = null;
      let cur = lane.head;
      while (cur != null && cur != h) {
        prev = cur;
        cur = cur.next;
      }
      if (cur == null) return false;
      if (prev == null) lane.head = h.next;
      else prev.next = h.next;
      if (lane.tail == h) lane.tail = prev;
      h.next = null;
      this.count--;
      if (lane.head == null) lanes.splice(i, 1);
      return true;
    }
    return false;
  }

  private laneOf(tenant: u64): Lane {
    const lanes = this.lanes;
    for (let i = 0; i < lanes.length; i++) {
      if (unchecked(lanes[i]).tenant == tenant) return unchecked(lanes[i]);
    }
    const lane = new Lane(tenant);
    lanes.push(lane);
    return lane;
  }
}
