// Envoy's stats for proxy-wasm metrics. A stat is process-wide by name (every
// worker's VM that defines "x" adds into the same counter), while metric ids
// are per VM and encode the type in their low two bits: counters 4, 8, ...,
// gauges 5, 9, ..., histograms 6, 10, ... (Envoy's Wasm::nextCounterMetricId
// and kMetricTypeMask).
import { METRIC_KINDS, Status, type MetricKind } from "./abi.js";

export interface Stat {
  kind: MetricKind;
  /** Counter total or gauge value. */
  value: bigint;
  /** Every value a histogram recorded. */
  samples: bigint[];
}

export class MetricStore {
  private readonly stats = new Map<string, Stat>();

  /** The stat named `name`, created on first definition. Redefining with another type is a test bug. */
  define(kind: MetricKind, name: string): Stat {
    let stat = this.stats.get(name);
    if (!stat) {
      stat = { kind, value: 0n, samples: [] };
      this.stats.set(name, stat);
    }
    if (stat.kind !== kind) throw new Error(`proxy-wasm emulator: metric ${name} defined as ${stat.kind} and as ${kind}`);
    return stat;
  }

  get(name: string): Stat | undefined {
    return this.stats.get(name);
  }

  names(): string[] {
    return [...this.stats.keys()];
  }
}

/** One VM's metric ids, mapped onto the process-wide stats. */
export class VmMetrics {
  private readonly byId = new Map<number, Stat>();
  private readonly lastId = [0, 1, 2];

  constructor(private readonly store: MetricStore) {}

  define(type: number, name: string): { status: number; id: number } {
    const kind = METRIC_KINDS[type];
    if (kind === undefined) return { status: Status.BadArgument, id: 0 };
    const id = (this.lastId[type] += 4);
    this.byId.set(id, this.store.define(kind, name));
    return { status: Status.Ok, id };
  }

  /** Counters only go up (an offset <= 0 is BAD_ARGUMENT); gauges move either way; histograms refuse. */
  increment(id: number, offset: bigint): number {
    const stat = this.byId.get(id);
    const kind = METRIC_KINDS[id & 3];
    if (kind === "histogram" || kind === undefined) return Status.BadArgument;
    if (!stat) return Status.NotFound;
    if (kind === "counter" && offset <= 0n) return Status.BadArgument;
    stat.value += offset;
    return Status.Ok;
  }

  /** A counter adds the value, a gauge takes it, a histogram records it. */
  record(id: number, value: bigint): number {
    const stat = this.byId.get(id);
    if (!stat) return Status.NotFound;
    if (stat.kind === "counter") stat.value += value;
    else if (stat.kind === "gauge") stat.value = value;
    else stat.samples.push(value);
    return Status.Ok;
  }
}
