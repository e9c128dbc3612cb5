// What the Envoy filter keeps in shared data for all of its workers (the
// in-flight table, the prefix log, the memory of refused requests), kept once for several native routers that
// play those workers: the simulator's "ours" policy, the scorer tests and the
// filter/native parity test. Each call hands the bytes to a router before it
// uses them and takes them back after, as a worker reads and writes the keys.
import type { ApiKind, HeldResult, NativeRouter, PumpEvent, RequestEndSpec, RouteOptions, RouteResult } from "./router.js";
import type { SnapshotMsg } from "../../host/proto.js";

export class NativeSharedData {
  inflight: Uint8Array = new Uint8Array(0);
  refusals: Uint8Array = new Uint8Array(0);
  prefixLog: Uint8Array = new Uint8Array(0);
  /** What every worker holds (the filter's llm_gateway.queues key). */
  board: Uint8Array = new Uint8Array(0);
  /** The other Envoy replicas' in flight as the link last published it (llm_gateway.peers_inflight). */
  peers: Uint8Array = new Uint8Array(0);
  /** This Envoy's place among the replicas, as the link last published it (the snapshot cell's; count 0: alone). */
  place = { index: 0, count: 0 };

  /** Routes on `router` against the shared in-flight table, which then counts the request. */
  route(router: NativeRouter, body: string | Uint8Array, kind: ApiKind = "chat", options: RouteOptions = {}): RouteResult {
    router.setInflight(this.inflight);
    router.setRefusals(this.refusals);
    const result = router.route(body, kind, options);
    this.takeInflight(router);
    // Only a request that found no room changes it.
    if ("status" in result ? result.status === 429 : result.retried) this.refusals = router.refusalTable();
    return result;
  }

  /**
   * route() for a request that may be held (options.holdId): the board then
   * learns what this worker holds. As the filter, a worker reads the board
   * only while it holds requests or last saw others hold some.
   */
  routeOrHold(router: NativeRouter, body: string | Uint8Array, kind: ApiKind = "chat", options: RouteOptions = {}): RouteResult | HeldResult {
    router.setInflight(this.inflight);
    router.setRefusals(this.refusals);
    if (router.boardBusy() || router.heldCount() > 0) router.setBoard(this.board);
    const result = router.routeOrHold(body, kind, options);
    this.takeInflight(router);
    if ("held" in result) {
      // Its summary joins the others' as they stand now (the filter's compare-and-swap write).
      router.setBoard(this.board);
      this.board = router.boardBytes();
    }
    // A refusal remembers the body; a held or admitted retry used its memory.
    if ("held" in result || ("status" in result ? result.status === 429 : result.retried)) this.refusals = router.refusalTable();
    return result;
  }

  /**
   * A worker's refresh tick (GatewayRoot.onTick): its flush, then for its held
   * requests (GatewayRoot.releaseHeld) those it releases or refuses now.
   */
  pump(router: NativeRouter): PumpEvent[] {
    this.flush(router);
    if (router.heldCount() === 0 && !router.boardBusy()) return [];
    router.setBoard(this.board);
    if (router.heldCount() === 0 && !router.boardBusy()) return [];
    router.setInflight(this.inflight);
    router.setRefusals(this.refusals);
    const events = router.heldCount() > 0 ? router.pump() : [];
    this.takeInflight(router);
    // A request refused past its budget is remembered, so its retry is known.
    if (events.some((e) => "status" in e && e.status === 429)) this.refusals = router.refusalTable();
    this.board = router.boardBytes();
    return events;
  }

  /** A held request's client left. */
  cancel(router: NativeRouter, holdId: number): boolean {
    const held = router.cancel(holdId);
    if (held) {
      router.setBoard(this.board);
      this.board = router.boardBytes();
    }
    return held;
  }

  /**
   * A request routed to `address` ended (NativeRouter.endRequest); returns the
   * failures recorded against pods. Its release reaches the shared table with
   * the worker's next routed request or flush(), as the filter's does.
   */
  endRequest(router: NativeRouter, end: RequestEndSpec): number {
    return router.endRequest(end);
  }

  /** A stream routed to `address` sent its first bytes (NativeRouter.firstBytes): shared at once, with the releases that waited. */
  firstBytes(router: NativeRouter, address: string, prefillTokens: number): void {
    if (prefillTokens <= 0) return;
    router.setInflight(this.inflight);
    router.firstBytes(address, prefillTokens);
    this.takeInflight(router);
  }

  /** The start of a worker's refresh tick: what its requests changed since it last wrote the table is shared now. */
  flush(router: NativeRouter): void {
    router.setInflight(this.inflight);
    if (router.flushInflight()) this.inflight = router.inflightTable();
  }

  /** A worker's tick reads the peers' in flight and the place the link published. */
  loadPeers(router: NativeRouter): void {
    router.setPeers(this.peers);
    router.setReplicaPlace(this.place.index, this.place.count);
  }

  /** A request routed to `address` ended: answered 200 by that pod, or (`answered` false) with no answer at all. */
  release(router: NativeRouter, address: string, answered = true): void {
    this.endRequest(router, answered ? { address, status: 200 } : { address });
  }

  /** The table as `router` left it, if it wrote it (a request counted on a pod). */
  private takeInflight(router: NativeRouter): void {
    if (router.inflightPublished()) this.inflight = router.inflightTable();
  }

  /** Installs a snapshot on `router`, the current counts as its baseline. */
  install(router: NativeRouter, snapshot: SnapshotMsg | Uint8Array): void {
    router.setInflight(this.inflight);
    router.setSnapshot(snapshot);
  }

  /** A refresh tick's prefix-log exchange. */
  exchangePrefixLog(router: NativeRouter): void {
    this.prefixLog = router.exchangePrefixLog(this.prefixLog);
  }

  /** The shared count for `address`, as `router` reads it. */
  countOf(router: NativeRouter, address: string): number {
    router.setInflight(this.inflight);
    return router.inflightOf(address);
  }
}
