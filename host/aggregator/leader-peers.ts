// Leader election without Kubernetes: every aggregator has the same list of
// peers; the first one in the list whose gRPC port answers leads. A peer
// counts as gone once its port refuses connections (its process has ended),
// or after SILENT_PROBES probes in a row without an answer. Meant for one
// host or a trusted network: a peer cut off from the others leads on its
// own side too (a Lease rules that out).
import type { Leadership, LeadershipOptions } from "./leadership.js";
import { probePeer } from "./peer-probe.js";

const SILENT_PROBES = 3;

interface Peer {
  address: string;
  alive: boolean;
  silent: number;
}

export async function peerLeadership(peers: readonly string[], probeMs: number, opts: LeadershipOptions): Promise<Leadership> {
  const index = peers.indexOf(opts.self);
  if (index < 0) throw new Error(`aggregator.leaderElection.peers: this aggregator's address ${opts.self} is not in the list (${peers.join(", ")})`);
  // Only the peers before this one decide whether it leads.
  const before: Peer[] = peers.slice(0, index).map((address) => ({ address, alive: true, silent: 0 }));
  const listeners: Array<(leading: boolean) => void> = [];
  const firstAlive = () => before.find((p) => p.alive)?.address ?? null;
  let leading = false;
  let closed = false;
  let timer: NodeJS.Timeout | null = null;

  async function round(): Promise<void> {
    const results = await Promise.all(before.map((p) => probePeer(p.address, probeMs)));
    results.forEach((result, i) => {
      const p = before[i];
      p.silent = result === "silent" ? p.silent + 1 : 0;
      p.alive = result === "alive" || (result === "silent" && p.silent < SILENT_PROBES);
    });
    const next = firstAlive() === null;
    if (next === leading || closed) return;
    leading = next;
    opts.log(leading ? `leading: no aggregator listed before ${opts.self} answers` : `standing by: ${firstAlive()} answers and is listed first`);
    for (const cb of listeners) cb(leading);
  }

  const loop = async () => {
    await round();
    if (!closed) timer = setTimeout(loop, probeMs);
  };
  await round();
  if (!leading) opts.log(`standing by: ${firstAlive()} leads`);
  timer = setTimeout(loop, probeMs);

  return {
    leading: () => leading,
    leader: () => (leading ? opts.self : firstAlive()),
    onChange: (cb) => void listeners.push(cb),
    async close() {
      closed = true;
      if (timer) clearTimeout(timer);
    },
  };
}
