/**
 * A picker that scrapes the pods itself, as the reference Endpoint Picker
 * does: one collector loop per pod, started at its own moment (so the loops
 * have independent phases), each answer landing after the scrape latency.
 * The picker reads the last landed values: as stale as our aggregator's,
 * without the push hop and the filter tick.
 */
import type { EndpointMetrics } from "../../host/aggregator/normalise.js";
import type { GatewayModel } from "../scenario.js";
import type { EventQueue } from "./events.js";
import type { SimFleet } from "./fleet.js";
import type { Rng } from "../../testing/fixtures/rng.js";
import { scrapePod } from "./scrape.js";

export class PerPodScrapes {
  /** Latest landed metrics per pod (index = fleet pod index). */
  readonly latest: EndpointMetrics[];
  /** When each pod's latest metrics landed. */
  readonly landedMs: number[];

  constructor(fleet: SimFleet, queue: EventQueue, model: GatewayModel, phaseRng: Rng) {
    this.latest = fleet.pods.map((p) => scrapePod(p));
    this.landedMs = fleet.pods.map(() => 0);
    for (const pod of fleet.pods) {
      const latency = model.scrapeLatencyMs * phaseRng.uniform(0.5, 1.5);
      queue.every(phaseRng.uniform(0, model.scrapeIntervalMs), model.scrapeIntervalMs, (t) => {
        queue.at(t + latency, (landed) => {
          this.latest[pod.index] = scrapePod(pod);
          this.landedMs[pod.index] = landed;
        });
      });
    }
  }
}
