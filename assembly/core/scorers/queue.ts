import { Endpoint, Weights } from "../snapshot";
import { MinMaxScorer } from "./scorer";

/** Prefers short waiting queues; counts requests this picker sent since the last snapshot. */
export class QueueScorer extends MinMaxScorer {
  weight(w: Weights): f64 { return w.queue; }

  load(e: Endpoint): f64 { return <f64>(e.waiting + e.pending); }
}
