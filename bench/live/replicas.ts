// Live runs of ours with several Envoys: one aggregator, R Envoys with the
// filter rendered from the same config, and a round-robin front
// (testing/launcher/front.ts) the client sends to, as a load balancer
// spreads clients over replicas in production. One Envoy goes behind the
// front too, so the counts differ only in R. Today the replicas share
// nothing but the aggregator's snapshot: each one's view of in-flight
// requests and prefix placements is its own.
import type { GatewayConfig } from "../../host/config.js";
import { startAggregator } from "../../host/aggregator/index.js";
import { startFront } from "../../testing/launcher/front.js";
import { startEnvoyReplicas, waitHealthy } from "../../testing/launcher/replicas.js";
import type { Table } from "../report/table.js";
import type { PolicyResult } from "../types.js";
import type { Gateway } from "./gateways.js";

/** The name of ours with `envoys` Envoys behind the front. */
export const replicatedName = (policy: string, envoys: number) => `${policy}/${envoys}-envoy${envoys === 1 ? "" : "s"}`;

export async function startOursReplicated(config: GatewayConfig, workers: number, envoys: number): Promise<Gateway> {
  const aggregator = await startAggregator(config, { metricsPort: false, log: () => {} });
  const stops: Array<() => Promise<void>> = [() => aggregator.close()];
  const stop = async () => {
    for (const s of stops.reverse()) await s().catch(() => {});
  };
  try {
    const replicas = await startEnvoyReplicas(config, { count: envoys, aggregatorPort: aggregator.grpcPort, concurrency: workers });
    stops.push(() => replicas.close());
    // Every count starts measuring from a routing view.
    await Promise.all(replicas.addresses.map((a) => waitHealthy(`http://${a}`)));
    const front = await startFront({ host: "127.0.0.1", port: 0, replicas: replicas.addresses });
    stops.push(() => front.envoy.stop());
    await waitHealthy(front.url);
    return { url: front.url, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

export interface EnvoysRow {
  policy: string;
  envoys: number;
  p95TtftMs: number | null;
  p95E2eMs: number | null;
  goodput: number;
  /** p95 TTFT and E2E against the one-Envoy run, as a fraction (0.05 = 5% slower). */
  ttftVsOne: number | null;
  e2eVsOne: number | null;
}

/** Each replicated run against the one-Envoy run of the same policy, on the same trace and fleet. */
export function envoysRows(policies: readonly PolicyResult[], base: string, counts: readonly number[]): EnvoysRow[] {
  const find = (n: number) => policies.find((p) => p.policy === replicatedName(base, n));
  const one = find(1);
  const vs = (x: number | undefined, y: number | undefined) => (x === undefined || y === undefined || y === 0 ? null : x / y - 1);
  return counts.flatMap((n) => {
    const p = find(n);
    if (!p) return [];
    return [{
      policy: p.policy,
      envoys: n,
      p95TtftMs: p.ttftMs?.p95 ?? null,
      p95E2eMs: p.e2eMs?.p95 ?? null,
      goodput: p.completedShare,
      ttftVsOne: vs(p.ttftMs?.p95, one?.ttftMs?.p95),
      e2eVsOne: vs(p.e2eMs?.p95, one?.e2eMs?.p95),
    }];
  });
}

/** The live target: R Envoys' p95 (TTFT and E2E) within this fraction of one Envoy's. */
export const ENVOYS_TARGET = 0.1;

export function envoysTable(rows: readonly EnvoysRow[]): Table {
  const pct = (f: number | null) => (f === null ? "-" : `${f >= 0 ? "+" : ""}${(f * 100).toFixed(1)}%`);
  const ms = (v: number | null) => (v === null ? "-" : `${Math.round(v)} ms`);
  return {
    headers: ["policy", "Envoys", "TTFT p95", "vs 1", "E2E p95", "vs 1", "goodput", `within ${ENVOYS_TARGET * 100}%`],
    numeric: [false, true, true, true, true, true, true, false],
    rows: rows.map((r) => [
      r.policy, String(r.envoys), ms(r.p95TtftMs), pct(r.ttftVsOne), ms(r.p95E2eMs), pct(r.e2eVsOne), `${(r.goodput * 100).toFixed(1)}%`,
      r.envoys === 1 || r.ttftVsOne === null || r.e2eVsOne === null ? "-" : r.ttftVsOne <= ENVOYS_TARGET && r.e2eVsOne <= ENVOYS_TARGET ? "yes" : "no",
    ]),
  };
}
