/**
 * The metrics aggregator in virtual time, as host/aggregator/index.ts runs it:
 * one timer every scrapeIntervalMs starts a scrape of every pod; each answer
 * lands after the scrape latency, updates that pod's state (recordScrape,
 * capacity learning included) and rebuilds the snapshot with the
 * aggregator's own code (buildSnapshotBody, SnapshotTracker); the timer
 * rebuilds it too (freshness changes with time alone). Every new version
 * goes to `publish`.
 */
import { CapacityLearner } from "../../host/aggregator/capacity.js";
import { buildSnapshotBody, recordScrape, SnapshotTracker, type EndpointState, type Snapshot } from "../../host/aggregator/snapshot.js";
import { parseGatewayConfig, type GatewayConfig, type ScorerWeights } from "../../host/config.js";
import type { GatewayModel, Scenario } from "../scenario.js";
import type { EventQueue } from "./events.js";
import type { SimFleet } from "./fleet.js";
import type { Rng } from "./rng.js";
import { scrapePod } from "./scrape.js";

/**
 * The gateway config the real stack would run for this fleet, through the
 * real loader (defaults included). Admission is on by default (the built-in
 * `latency` profile); `admission: false` turns it off there.
 */
export function gatewayConfig(
  scenario: Scenario,
  trace: { adapters: string[][] },
  fleet: SimFleet,
  weights: ScorerWeights,
  opts: { admission?: boolean } = {},
): GatewayConfig {
  const doc = {
    ...(opts.admission === false ? { profiles: { latency: { admission: { enabled: false } } } } : {}),
    aggregator: { scrapeIntervalMs: scenario.gateway.scrapeIntervalMs, staleAfterMs: scenario.gateway.staleAfterMs },
    pools: scenario.models.map((m, p) => ({
      name: m.name,
      baseModel: m.name,
      engine: "vllm",
      adapters: trace.adapters[p],
      weights,
      endpoints: fleet.pools[p].map((i) => fleet.pods[i].address),
      // The simulated engines' batch limit, as an operator states it; the
      // config has one per pool, so a pool mixing limits states its smallest.
      batchSlots: Math.min(...fleet.pools[p].map((i) => fleet.pods[i].engine.config.maxNumSeqs)),
    })),
  };
  return parseGatewayConfig(JSON.stringify(doc), `simulated gateway for ${scenario.name}`);
}

export class AggregatorModel {
  private readonly states: EndpointState[][];
  private readonly tracker: SnapshotTracker;

  constructor(
    private readonly config: GatewayConfig,
    fleet: SimFleet,
    queue: EventQueue,
    model: GatewayModel,
    phaseRng: Rng,
    private readonly publish: (snapshot: Snapshot, t: number) => void,
  ) {
    // The aggregator starts serving only after a first scrape of every pod, so the run starts warm.
    this.states = fleet.pools.map((pods) =>
      pods.map((i) => {
        const state: EndpointState = { address: fleet.pods[i].address, metrics: null, lastGoodMs: null, capacity: new CapacityLearner() };
        recordScrape(state, scrapePod(fleet.pods[i]), 0);
        return state;
      }),
    );
    this.tracker = new SnapshotTracker(buildSnapshotBody(config, this.states, 0), 1, 0);
    // Each pod answers with its own network and server latency, fixed per pod.
    const latency = fleet.pods.map(() => model.scrapeLatencyMs * phaseRng.uniform(0.5, 1.5));
    const slot = fleet.pods.map((p) => [p.pool, fleet.pools[p.pool].indexOf(p.index)] as const);
    queue.every(phaseRng.uniform(0, model.scrapeIntervalMs), model.scrapeIntervalMs, (t) => {
      for (const pod of fleet.pods) {
        queue.at(t + latency[pod.index], (landed) => {
          const [p, e] = slot[pod.index];
          recordScrape(this.states[p][e], scrapePod(pod), landed);
          this.refresh(landed);
        });
      }
      this.refresh(t);
    });
  }

  get current(): Snapshot {
    return this.tracker.current;
  }

  private refresh(t: number): void {
    const changed = this.tracker.update(buildSnapshotBody(this.config, this.states, t), t);
    if (changed) this.publish(changed, t);
  }
}
