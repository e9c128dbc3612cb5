// What Envoy's admin interface says about a pool's hosts over time: how many
// attempts each got (requests sent on a connection to it, plus connections it
// refused), whether outlier detection has ejected it, and how many of the
// pool's pods the filter's passive-health ledger has ejected. A dead pod
// counts nothing itself, so this is how the bench sees traffic still going to it.
import { PeriodicSampler } from "./periodic-sampler.js";

export interface HostState {
  attempts: number;
  ejected: boolean;
}

export interface ClusterSample {
  /** When the answer arrived: everything it counts happened before then. */
  atMs: number;
  hosts: Record<string, HostState>;
  /** The filter's pool_pods_ejected gauge for the pool (the filter moves it at most once a second). */
  filterEjected: number;
}

interface ClustersJson {
  cluster_statuses?: Array<{
    name: string;
    host_statuses?: Array<{
      address?: { socket_address?: { address: string; port_value: number } };
      stats?: Array<{ name: string; value?: string }>;
      health_status?: { failed_outlier_check?: boolean };
    }>;
  }>;
}

/** Samples one pool's hosts every `intervalMs` until stopped. */
export class ClusterWatch extends PeriodicSampler<ClusterSample> {
  constructor(
    private readonly adminUrl: string,
    private readonly pool: string,
    private readonly clock: () => number,
    intervalMs = 100,
  ) {
    super(intervalMs);
  }

  /** Takes (and records) a sample now: the baseline right before a fault. */
  async sample(): Promise<ClusterSample> {
    const gauge = encodeURIComponent(`^wasmcustom\\.llm_gateway\\.pool_pods_ejected;pool=${this.pool}$`);
    const [clusters, stats] = await Promise.all([
      fetch(`${this.adminUrl}/clusters?format=json`),
      fetch(`${this.adminUrl}/stats?format=json&type=Gauges&filter=${gauge}`),
    ]);
    if (clusters.status !== 200) throw new Error(`GET /clusters returned ${clusters.status}`);
    if (stats.status !== 200) throw new Error(`GET /stats returned ${stats.status}`);
    const body = (await clusters.json()) as ClustersJson;
    const filterEjected = Number(((await stats.json()) as { stats: Array<{ value?: number }> }).stats[0]?.value ?? 0);
    const atMs = this.clock();
    const hosts: Record<string, HostState> = {};
    for (const h of body.cluster_statuses?.find((c) => c.name === `llm_gateway_pool_${this.pool}`)?.host_statuses ?? []) {
      const stat = (name: string) => Number(h.stats?.find((s) => s.name === name)?.value ?? 0);
      hosts[`${h.address?.socket_address?.address}:${h.address?.socket_address?.port_value}`] = {
        attempts: stat("rq_total") + stat("cx_connect_fail"),
        ejected: h.health_status?.failed_outlier_check === true,
      };
    }
    const sample = { atMs, hosts, filterEjected };
    this.samples.push(sample);
    return sample;
  }

  /** One entry per attempt on `address` after `fromMs`, at the time of the first sample that counted it. */
  attemptTimesAfter(address: string, fromMs: number): number[] {
    const sorted = this.sorted();
    let seen = sorted.filter((s) => s.atMs <= fromMs).at(-1)?.hosts[address]?.attempts ?? 0;
    const out: number[] = [];
    for (const s of sorted) {
      if (s.atMs <= fromMs) continue;
      for (; seen < (s.hosts[address]?.attempts ?? 0); seen++) out.push(s.atMs);
    }
    return out;
  }

  /** When `address` was ejected after `fromMs`, as the samples saw it; `toMs` null if it still was at the end. */
  ejectionsAfter(address: string, fromMs: number): Array<{ fromMs: number; toMs: number | null }> {
    return this.spansAfter(fromMs, (s) => s.hosts[address]?.ejected === true);
  }

  private spansAfter(fromMs: number, on: (s: ClusterSample) => boolean): Array<{ fromMs: number; toMs: number | null }> {
    const out: Array<{ fromMs: number; toMs: number | null }> = [];
    for (const s of this.sorted()) {
      if (s.atMs <= fromMs) continue;
      const open = out.at(-1)?.toMs === null;
      if (on(s) && !open) out.push({ fromMs: s.atMs, toMs: null });
      else if (!on(s) && open) out.at(-1)!.toMs = s.atMs;
    }
    return out;
  }

  /** When the filter's ledger had any of the pool's pods ejected after `fromMs`; `toMs` null if it still had at the end. */
  filterEjectionsAfter(fromMs: number): Array<{ fromMs: number; toMs: number | null }> {
    return this.spansAfter(fromMs, (s) => s.filterEjected > 0);
  }

  /** A baseline sample can land between two timer samples. */
  private sorted(): ClusterSample[] {
    return [...this.samples].sort((a, b) => a.atMs - b.atMs);
  }
}
