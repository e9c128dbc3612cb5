/** Cumulative-bucket histogram in seconds, shaped like a Prometheus histogram. */

/** vLLM's bucket bounds for vllm:time_to_first_token_seconds. */
export const TTFT_BUCKETS_S: readonly number[] = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
  160.0, 640.0, 2560.0,
];

/** vLLM's bucket bounds for vllm:e2e_request_latency_seconds. */
export const E2E_BUCKETS_S: readonly number[] = [
  0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
  1920.0, 7680.0,
];

/**
 * vLLM's bucket bounds for vllm:inter_token_latency_seconds (and
 * time_per_output_token_seconds before it). The fake uses them for every
 * dialect: the aggregator reads only _sum and _count.
 */
export const ITL_BUCKETS_S: readonly number[] = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];

export interface HistogramSnapshot {
  /** Upper bounds, ascending, without +Inf. */
  bounds: readonly number[];
  /** Cumulative counts per bound (observations <= bound). */
  cumulative: number[];
  count: number;
  sum: number;
}

export class Histogram {
  private readonly counts: number[];
  private total = 0;
  private sumValue = 0;

  constructor(readonly bounds: readonly number[]) {
    this.counts = new Array<number>(bounds.length).fill(0);
  }

  observe(v: number): void {
    this.total++;
    this.sumValue += v;
    for (let i = 0; i < this.bounds.length; i++) {
      if (v <= this.bounds[i]) {
        this.counts[i]++;
        return;
      }
    }
  }

  snapshot(): HistogramSnapshot {
    const cumulative: number[] = [];
    let acc = 0;
    for (const c of this.counts) cumulative.push((acc += c));
    return { bounds: this.bounds, cumulative, count: this.total, sum: this.sumValue };
  }
}
