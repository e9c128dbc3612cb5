// Which aggregator serves Envoy (snapshot stream and ADS) right now: the
// interface every way of electing one implements. With
// aggregator.leaderElection, one of several leads: by a Kubernetes Lease
// (leader-lease.ts) or the lowest-listed peer that answers (leader-peers.ts);
// leader-choice.ts picks the one the config names. The others keep
// discovering and scraping, so the one that takes over pushes a fresh view at
// once; standby.ts turns their streams away.

export interface Leadership {
  /** Whether this aggregator serves Envoy now. */
  leading(): boolean;
  /** The leader's gRPC address as far as this one knows (itself when leading); null when unknown. */
  leader(): string | null;
  /** Called on every change of leading(). */
  onChange(cb: (leading: boolean) => void): void;
  /** Stops taking part; a leader hands the lead over (releases its Lease). */
  close(): Promise<void>;
}

export interface LeadershipOptions {
  /** The gRPC address the other aggregators reach this one at. */
  self: string;
  /** This aggregator's name in a Lease; default hostname_pid (the pod's name in Kubernetes, plus the pid). */
  identity?: string;
  log: (line: string) => void;
}

/** A lone aggregator: it always leads. */
export function soleLeadership(self: string): Leadership {
  return { leading: () => true, leader: () => self, onChange: () => {}, close: async () => {} };
}
