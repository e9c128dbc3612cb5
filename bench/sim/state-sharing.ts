/**
 * How the gateway replicas of a run learn from one another what a scrape
 * does not show (requests in flight, prefix and adapter placements, health
 * verdicts, queue state): each replica reports its state to the control
 * plane on its stream, the control plane merges and sends every replica the
 * others' reports back. Each replica already gets the same snapshot pushes;
 * this is the only other way state may cross between replicas.
 *
 * Today's gateway shares nothing beyond the snapshot (`shareNothing`): a
 * replica that joins is never asked for a report and never receives one,
 * and no event is scheduled, so a run is exactly as without replicas.
 */

import type { EventQueue } from "./events.js";

/** One replica's side of a sharing channel. */
export interface SharingMember<S> {
  /** What the replica tells the control plane at time t (its stream's next report). */
  report(t: number): S;
  /** The other replicas' reports of one round, in replica order, as they reach this replica at t. */
  receive(others: readonly S[], t: number): void;
}

export interface StateSharing {
  /** Replica `replica` takes part in `channel` (one kind of state); members of one channel exchange with each other only. */
  join<S>(channel: string, replica: number, member: SharingMember<S>): void;
}

/** Today: replicas share nothing but the snapshot every one of them is pushed. */
export const shareNothing: StateSharing = {
  join() {},
};

export interface PeriodicSharingOptions {
  /** The control plane merges and fans out this often. */
  intervalMs: number;
  /** One way on a replica's stream: a report reaches the control plane, and the merged state a replica, this much later. */
  oneWayMs: number;
}

/**
 * The proposed design, modelled (not yet built in the filter or the
 * aggregator): replicas report on their streams, the control plane merges
 * every `intervalMs` and fans the result out to every replica. A round
 * taken at t holds each replica's state as of t - oneWayMs (read here at t)
 * and reaches the replicas at t + oneWayMs, hence the 2 x oneWayMs.
 */
export function periodicSharing(queue: EventQueue, opts: PeriodicSharingOptions): StateSharing {
  const channels = new Map<string, Array<{ replica: number; member: SharingMember<unknown> }>>();
  return {
    join<S>(channel: string, replica: number, member: SharingMember<S>) {
      let members = channels.get(channel);
      if (!members) {
        const mine: Array<{ replica: number; member: SharingMember<unknown> }> = [];
        channels.set(channel, mine);
        queue.every(opts.intervalMs, opts.intervalMs, (t) => {
          const reports = mine.map((m) => m.member.report(t));
          queue.at(t + 2 * opts.oneWayMs, (at) => {
            for (const m of mine) m.member.receive(reports.filter((_, i) => mine[i].replica !== m.replica), at);
          });
        });
        members = mine;
      }
      members.push({ replica, member: member as SharingMember<unknown> });
    },
  };
}
