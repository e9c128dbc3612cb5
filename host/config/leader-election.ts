// Several aggregators, one leader: the leader serves Envoy's snapshot stream
// and ADS, the others scrape too (so a takeover starts from a fresh view)
// and refuse those streams. Who leads is a Kubernetes Lease, or without
// Kubernetes the lowest-listed peer that answers. Absent: one aggregator,
// which always leads.
import * as z from "zod";

/** A coordination.k8s.io/v1 Lease the aggregators compete for. */
export interface LeaseElectionConfig {
  namespace: string;
  name: string;
  /** The Lease's leaseDurationSeconds: how long a leader that stopped renewing keeps it. */
  durationS: number;
  /** Credentials for an aggregator outside the cluster (relative to the config file); default KUBECONFIG, else the service account. */
  kubeconfig?: string;
}

export interface LeaderElectionConfig {
  lease?: LeaseElectionConfig;
  /** Every aggregator's gRPC address, this one's included: the first that answers leads. */
  peers?: string[];
  /** How often a standby checks that the leader's gRPC port still answers; a refused connection hands over at once. */
  probeMs: number;
}

export const DEFAULT_LEASE_NAME = "llm-gateway-aggregator";

/** `endpoint` is the config's host:port schema (passed in: host/config.ts owns it). */
export const leaderElectionSchema = (endpoint: z.ZodType<string>) =>
  z.strictObject({
    lease: z
      .strictObject({
        namespace: z.string().min(1, { error: "expected the namespace the Lease lives in" }),
        name: z.string().min(1).default(DEFAULT_LEASE_NAME),
        durationS: z.number().int().min(1).max(60).default(2),
        kubeconfig: z.string().min(1).optional(),
      })
      .optional(),
    peers: z.array(endpoint).min(2, { error: "expected at least two aggregators" }).optional(),
    probeMs: z.number().int().min(10).max(10_000).default(100),
  });

/** How long after a hung leader's last renewal Envoy may wait for the new one's first snapshot. */
export const hungLeaderBoundMs = (durationS: number, probeMs: number) => durationS * 1250 + 4 * probeMs;

/** The leader election's problems, each naming its field. */
export function leaderElectionIssues(election: LeaderElectionConfig | undefined, maxAgeMs: number): string[] {
  if (!election) return [];
  const issues: string[] = [];
  if ((election.lease === undefined) === (election.peers === undefined)) {
    issues.push("aggregator.leaderElection: give exactly one of lease (a Kubernetes Lease) or peers (a static list of aggregators)");
  }
  if (election.peers && new Set(election.peers).size !== election.peers.length) issues.push("aggregator.leaderElection.peers: an aggregator is listed twice");
  // A leader that hangs without closing its port is replaced only once its Lease has run out: Envoy's view must outlive that.
  if (election.lease && hungLeaderBoundMs(election.lease.durationS, election.probeMs) >= maxAgeMs) {
    issues.push(
      `aggregator.leaderElection.lease.durationS: a hung leader is replaced up to ${hungLeaderBoundMs(election.lease.durationS, election.probeMs)} ms after its last renewal ` +
        `(durationS x 1.25, the standby reading the Lease a quarter-duration late at worst, plus 4 x probeMs for Envoy to follow); gateway.staleView.maxAgeMs (${maxAgeMs} ms) must be longer`,
    );
  }
  if (election.probeMs * 2 >= maxAgeMs) issues.push(`aggregator.leaderElection.probeMs: must be under half of gateway.staleView.maxAgeMs (${maxAgeMs} ms)`);
  return issues;
}
