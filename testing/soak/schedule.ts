// When pods fail, join and leave. The same cycle repeats for the whole run,
// each time in the next pool: a pod is killed (a crash) and comes back on its
// address later; then a new pod joins the pool and its oldest pod leaves, so
// over a long run every pod is eventually replaced.
import { POOLS } from "./gateway-config.js";

export const EVENT_KINDS = ["kill", "restore", "join", "leave"] as const;
export type EventKind = (typeof EVENT_KINDS)[number];

export interface Cycle {
  lengthMs: number;
  /** Offsets into the cycle; a restore undoes the kill before it. */
  steps: ReadonlyArray<{ atMs: number; kind: EventKind }>;
}

export const DEFAULT_CYCLE: Cycle = {
  lengthMs: 60_000,
  steps: [
    { atMs: 10_000, kind: "kill" },
    { atMs: 25_000, kind: "restore" },
    { atMs: 35_000, kind: "join" },
    { atMs: 50_000, kind: "leave" },
  ],
};

export interface PlannedEvent {
  atMs: number;
  kind: EventKind;
  pool: string;
}

/** Every event of the whole cycles that fit in `durationMs`. */
export function planEvents(cycle: Cycle, durationMs: number): PlannedEvent[] {
  const out: PlannedEvent[] = [];
  for (let c = 0; (c + 1) * cycle.lengthMs <= durationMs; c++) {
    const pool = POOLS[c % POOLS.length].name;
    for (const step of cycle.steps) out.push({ atMs: c * cycle.lengthMs + step.atMs, kind: step.kind, pool });
  }
  return out;
}
