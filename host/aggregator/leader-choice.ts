// The election the config names: none (this aggregator always leads), the
// peers' (leader-peers.ts) or a Kubernetes Lease (leader-lease.ts).
import { hostname } from "node:os";
import type { LeaderElectionConfig } from "../config/leader-election.js";
import { leaseLeadership } from "./leader-lease.js";
import { peerLeadership } from "./leader-peers.js";
import { soleLeadership, type Leadership, type LeadershipOptions } from "./leadership.js";

/** Joins the election the config names (resolves once this aggregator knows whether it leads). */
export async function startLeadership(election: LeaderElectionConfig | undefined, opts: LeadershipOptions): Promise<Leadership> {
  if (!election) return soleLeadership(opts.self);
  if (election.peers) return peerLeadership(election.peers, election.probeMs, opts);
  const identity = opts.identity ?? `${hostname()}_${process.pid}`;
  return leaseLeadership(election.lease!, election.probeMs, { ...opts, identity });
}
