/**
 * How the gateway replicas of a run learn from one another what a scrape
 * does not show (requests in flight, prefix and adapter placements, health
 * verdicts, queue state): each replica reports its state to the control
 * plane on its stream, the control plane merges and sends every replica the
 * others' reports back. Each replica already gets the same snapshot pushes;
 * this is the only other way state may cross between replicas.
 *
 * Without sharing (`shareNothing`: the gateway before sharing was built, or with it off) a
 * replica that joins is never asked for a report and never receives one,
 * and no event is scheduled, so a run is exactly as without replicas.
 */

import type { EventQueue } from "./events.js";

/** One replica's side of a sharing channel: it reports S, and is sent F (by default the others' reports of the round). */
export interface SharingMember<S, F = readonly S[]> {
  /** What the replica tells the control plane at time t (its stream's next report). */
  report(t: number): S;
  /** What the control plane made of one round for this replica (the others' reports, in replica order, unless a merge says otherwise), as it reaches it at t. */
  receive(fanOut: F, t: number): void;
}

/** How the control plane turns a round's reports into what each replica is sent (the real aggregator's code, when there is one). */
export interface ControlPlaneMerge<S, F> {
  take(replica: number, report: S): void;
  fanOut(replica: number): F;
}

export interface StateSharing {
  /**
   * Replica `replica` takes part in `channel` (one kind of state); members of
   * one channel exchange with each other only, through `merge` (the first
   * member's) if given.
   */
  join<S, F = readonly S[]>(channel: string, replica: number, member: SharingMember<S, F>, merge?: () => ControlPlaneMerge<S, F>): void;
}

/** No sharing: replicas share nothing but the snapshot every one of them is pushed. */
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
 * The design: replicas report on their streams, the control plane merges
 * every `intervalMs` and fans the result out to every replica. A round
 * taken at t holds each replica's state as of t - oneWayMs (read here at t)
 * and reaches the replicas at t + oneWayMs, hence the 2 x oneWayMs.
 */
export function periodicSharing(queue: EventQueue, opts: PeriodicSharingOptions): StateSharing {
  type Member = { replica: number; member: SharingMember<unknown, unknown> };
  const channels = new Map<string, Member[]>();
  return {
    join<S, F>(channel: string, replica: number, member: SharingMember<S, F>, merge?: () => ControlPlaneMerge<S, F>) {
      let members = channels.get(channel);
      if (!members) {
        const mine: Member[] = [];
        channels.set(channel, mine);
        const merger = merge?.() as ControlPlaneMerge<unknown, unknown> | undefined;
        queue.every(opts.intervalMs, opts.intervalMs, (t) => {
          const reports = mine.map((m) => m.member.report(t));
          let fanOuts: unknown[];
          if (merger) {
            mine.forEach((m, i) => merger.take(m.replica, reports[i]));
            fanOuts = mine.map((m) => merger.fanOut(m.replica));
          } else {
            fanOuts = mine.map((m) => reports.filter((_, i) => mine[i].replica !== m.replica));
          }
          queue.at(t + 2 * opts.oneWayMs, (at) => {
            mine.forEach((m, i) => m.member.receive(fanOuts[i], at));
          });
        });
        members = mine;
      }
      members.push({ replica, member: member as SharingMember<unknown, unknown> });
    },
  };
}
