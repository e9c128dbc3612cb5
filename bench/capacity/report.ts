// The capacity report as a table: per policy, each pod group's saturation
// throughput and the fleet's, and the scenario's offered load against it.
import { tableOf, type Column, type Table } from "../report/table.js";
import type { CapacityReport, GroupCapacity, PolicyCapacity } from "./index.js";

type Row = { policy: PolicyCapacity; group: GroupCapacity };

export function capacityTitle(r: CapacityReport): string {
  return (
    `capacity of ${r.scenario}: seed ${r.seed}, ${r.durationS} s of arrivals (${r.requests} requests, ${r.offeredPerS} req/s) ` +
    `replayed ${r.multiple}x faster; each pod's completed requests over its own makespan`
  );
}

export function capacityTable(r: CapacityReport): Table {
  const columns: Column<Row>[] = [
    ["policy", false, (x) => x.policy.policy],
    ["pod group", false, (x) => x.group.group],
    ["pods", true, (x) => String(x.group.pods)],
    ["completed", true, (x) => String(x.group.completed)],
    ["req/s", true, (x) => x.group.requestsPerS.toFixed(2)],
    ["req/s per pod", true, (x) => (x.group.requestsPerS / x.group.pods).toFixed(2)],
    ["offered load", true, (x) => (x.group.group === "fleet" ? `${Math.round((r.offeredPerS / x.group.requestsPerS) * 100)}%` : "")],
    ["note", false, (x) => (x.group.group !== "fleet" ? "" : [x.policy.unsaturated.length === 0 ? "" : `not saturated (${x.policy.unsaturated.join(", ")}): raise --multiple`, x.policy.errors > 0 ? `${x.policy.errors} errors` : ""].filter(Boolean).join("; "))],
  ];
  // One pod group is the fleet: its row would repeat the fleet's.
  const rows = r.policies.flatMap((policy) => [...(policy.groups.length > 1 ? policy.groups : []), policy.fleet].map((group) => ({ policy, group })));
  return tableOf(columns, rows);
}
