// `npm run bench -- --scenario X --replicas 1,2,4,8`: each scenario, seed and
// replica count simulated once (one job each, on the pool), then the replica
// tables printed and written to DIR/replicas/ (replicas.json, replicas.md);
// with --all (not --smoke) the Replicas section of BENCHMARKS.md (with
// --share-interval, docs/replicas.md's measured sharing) is rewritten too.
import { writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { projectRoot } from "../host/paths.js";
import type { Args } from "./cli.js";
import { writeJson } from "./report/outputs.js";
import { replicaGridTable, replicaRows, replicasMarkdown, replicaTable, type ReplicaRow } from "./report/replicas-table.js";
import { consoleTable } from "./report/table.js";
import { commandLine, progressReporter, updateBlock, type Io } from "./run-io.js";
import { loadScenario } from "./scenario.js";
import { startSimJobs, type SimJob } from "./sim/pool.js";
import type { ScenarioResult } from "./types.js";

/** The replica count the target is stated at. */
const LOSS_AT = 4;

export async function runReplicaBench(args: Args, argv: string[], io: Io): Promise<ReplicaRow[]> {
  const seeds = args.seeds ?? [undefined];
  const counts = args.replicas!;
  const scenarios = args.scenarios.map(loadScenario);
  const jobs: SimJob[] = scenarios.flatMap((scenario) =>
    counts.flatMap((replicas) => seeds.map((seed) => ({ scenario, opts: { seed, durationS: args.durationS, policies: args.policies, replicas, shareIntervalMs: args.shareIntervalMs } }))),
  );
  const reporters = jobs.map((j) => progressReporter(io, `${j.scenario.name} R=${j.opts.replicas}${j.opts.seed === undefined ? "" : ` seed ${j.opts.seed}`}`, args.jobs > 1));
  const runs = startSimJobs(jobs, args.jobs, (i, policy, f) => reporters[i](policy, f));
  const rows: ReplicaRow[] = [];
  const results: ScenarioResult[] = [];
  let k = 0;
  for (const scenario of scenarios) {
    const byCount = new Map<number, ScenarioResult[]>();
    for (const replicas of counts) {
      const mine = await Promise.all(runs.slice(k, k + seeds.length));
      k += seeds.length;
      byCount.set(replicas, mine);
      results.push(...mine);
    }
    const mine = replicaRows(byCount);
    rows.push(...mine);
    const first = byCount.get(counts[0])![0];
    io.out(`\n${scenario.name} (sim, seeds ${mine[0].seeds.join(", ")}, ${first.durationS} s, replicas ${counts.join(", ")})\n${consoleTable(replicaTable(mine))}\n`);
  }
  io.out(`\nevery scenario: completed, p95 / p99 TTFT (change against one replica)\n${consoleTable(replicaGridTable(rows, LOSS_AT))}\n`);
  const sharing = args.shareIntervalMs !== undefined;
  const dir = join(args.outDir, sharing ? "replicas-shared" : "replicas");
  const markdown = replicasMarkdown(rows, { command: commandLine(argv), lossAt: LOSS_AT, durationS: args.durationS ?? 0, shareIntervalMs: args.shareIntervalMs });
  writeJson(join(dir, "replicas.json"), { rows, results });
  writeFileSync(join(dir, "replicas.md"), `${markdown}\n`);
  if (args.json) writeJson(args.json, { rows });
  io.out(`results: ${relative(process.cwd(), dir) || "."}/\n`);
  if (args.all && !args.smoke) {
    // Sharing has its own section in docs/replicas.md, beside the design it measures.
    if (sharing) updateBlock(io, "replicas:shared", markdown, "## Measured: sharing through the control plane", "sharing section", join(projectRoot, "docs", "replicas.md"));
    else updateBlock(io, "replicas", markdown, "## Gateway replicas", "replicas section");
  }
  return rows;
}
