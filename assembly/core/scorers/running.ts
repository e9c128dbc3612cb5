import { Endpoint, Weights } from "../snapshot";
import { MinMaxScorer } from "./scorer";

/** Prefers endpoints with fewer requests in their running batch. */
export class RunningScorer extends MinMaxScorer {
  weight(w: Weights): f64 { return w.running; }

  load(e: Endpoint): f64 { return <f64>e.running; }
}
