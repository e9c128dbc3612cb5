/**
 * The metrics aggregator in virtual time, with its own parts: one timer
 * every scrapeIntervalMs starts a scrape of every pod; each answer lands
 * after the scrape latency and is booked on that pod's PodEntry (capacity
 * learning included), and the snapshot is brought up to date by the
 * aggregator's SnapshotBuilder; the timer does that too (freshness changes
 * with time alone). Every new version goes to `publish`.
 *
 * One difference from the aggregator: the snapshot follows each landing
 * rather than waiting for the cycle's last scrape, so the simulated view is
 * at most one scrape latency fresher than the real one.
 */
import { PodEntry } from "../../host/aggregator/pod-entry.js";
import { SnapshotBuilder, type SnapshotPool } from "../../host/aggregator/snapshot-builder.js";
import type { Snapshot } from "../../host/aggregator/snapshot.js";
import { parseGatewayConfig, type GatewayConfig, type ScorerWeights } from "../../host/config.js";
import type { GatewayModel, Scenario } from "../scenario.js";
import type { EventQueue } from "./events.js";
import type { SimFleet } from "./fleet.js";
import type { Rng } from "../../testing/fixtures/rng.js";
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
  private readonly pools: SnapshotPool[];
  private readonly builder: SnapshotBuilder;

  constructor(
    config: GatewayConfig,
    fleet: SimFleet,
    queue: EventQueue,
    model: GatewayModel,
    phaseRng: Rng,
    private readonly publish: (snapshot: Snapshot, t: number) => void,
  ) {
    // The aggregator starts serving only after a first scrape of every pod, so the run starts warm.
    const entries = fleet.pools.map((pods, p) =>
      pods.map((i) => {
        const entry = new PodEntry(fleet.pods[i].address, undefined, config.pools[p].batchSlots);
        entry.book(scrapePod(fleet.pods[i]), 0);
        return entry;
      }),
    );
    this.pools = config.pools.map((pool, p) => ({ config: pool, pods: entries[p] }));
    this.builder = new SnapshotBuilder(config, this.pools, 1, 0);
    // Each pod answers with its own network and server latency, fixed per pod.
    const latency = fleet.pods.map(() => model.scrapeLatencyMs * phaseRng.uniform(0.5, 1.5));
    const entryOf = fleet.pods.map((p) => entries[p.pool][fleet.pools[p.pool].indexOf(p.index)]);
    queue.every(phaseRng.uniform(0, model.scrapeIntervalMs), model.scrapeIntervalMs, (t) => {
      for (const pod of fleet.pods) {
        queue.at(t + latency[pod.index], (landed) => {
          entryOf[pod.index].book(scrapePod(pod), landed);
          this.refresh(landed);
        });
      }
      this.refresh(t);
    });
  }

  get current(): Snapshot {
    return this.builder.current;
  }

  private refresh(t: number): void {
    const built = this.builder.next(this.pools, false, t);
    if (built) this.publish(built.snapshot, t);
  }
}
