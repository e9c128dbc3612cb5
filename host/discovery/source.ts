// Where a pool's pods come from. Every source (static list, DNS names,
// Kubernetes label selector) reports the whole current target set of one pool
// whenever it changes; the aggregator scrapes exactly those targets and
// serves them to Envoy as the pool's endpoints, so nothing else can be routed to.

/** One model-server pod the gateway may route to and scrapes. */
export interface Target {
  /** IP literal Envoy connects to (never a name: EDS endpoints are addresses). */
  ip: string;
  port: number;
  /** ip:port, bracketed for IPv6: the Envoy endpoint address and the snapshot key. */
  address: string;
  /** Stable name for logs and metric labels: the pod's name, or the configured host:port. */
  name: string;
  /** Host header for scrapes (a DNS name's own name; the address otherwise). */
  hostHeader: string;
  /**
   * Configured capacity hint (relative speed), when the source knows one. A
   * source gives every target of a pool one or none: configured and learned
   * capacities are in different units.
   */
  capacity?: number;
}

export type DiscoveryEventKind = "added" | "removed" | "error" | "relist";

export interface DiscoverySink {
  /** The pool's complete current target set (not a delta). */
  targets(pool: string, targets: Target[]): void;
  /** Something happened worth counting (aggregator metric discovery_events_total). */
  event(pool: string, kind: DiscoveryEventKind, detail?: string): void;
}

export interface DiscoverySource {
  /** Starts watching; resolves once every pool it serves has had a first answer (possibly empty). */
  start(sink: DiscoverySink): Promise<void>;
  /**
   * The aggregator's hint that a target has stopped answering its scrapes.
   * A source that can only poll (DNS) looks again soon rather than at its
   * usual period: the pod may be gone, or back under another address.
   */
  notAnswering?(pool: string, address: string): void;
  close(): void;
}
