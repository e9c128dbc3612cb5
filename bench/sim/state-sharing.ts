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

/** One replica's side of a sharing channel. */
export interface SharingMember<S> {
  /** What the replica tells the control plane at time t (its stream's next report). */
  report(t: number): S;
  /** The other replicas' reports of one round, in replica order, as they reach this replica at t. */
  receive(others: readonly S[], t: number): void;
}

export interface StateSharing {
  /** Names the mode in results ("none" for today's gateway). */
  readonly name: string;
  /** Replica `replica` takes part in `channel` (one kind of state); members of one channel exchange with each other only. */
  join<S>(channel: string, replica: number, member: SharingMember<S>): void;
}

/** Today: replicas share nothing but the snapshot every one of them is pushed. */
export const shareNothing: StateSharing = {
  name: "none",
  join() {},
};
