// Stage (a): bodies through build/native.wasm, each answer checked against
// the server's reading of the same body (oracle.ts). A trap is a failure; the
// module is then reloaded so the run goes on.
import { NativeRouter } from "../testing/native/router.js";
import type { SnapshotMsg } from "../host/proto.js";
import { generateCase, type FuzzCase } from "./cases.js";
import { judge, OracleError, type Verdict } from "./oracle.js";
import { NATIVE_POOLS, servedModels, snapshotOf, type PoolSpec } from "./pools.js";
import { StageReport } from "./report.js";

/** The native router with a snapshot loaded; reload() after a trap. */
export class NativeTarget {
  private constructor(private router: NativeRouter, private readonly snapshot: SnapshotMsg) {}

  static async load(pools: readonly PoolSpec[]): Promise<NativeTarget> {
    const snapshot = snapshotOf(pools);
    const router = await NativeRouter.load();
    router.setSnapshot(snapshot);
    return new NativeTarget(router, snapshot);
  }

  /** The answer text, or the trap's message. */
  route(c: FuzzCase): { text: string } | { trap: string } {
    try {
      return { text: this.router.routeText(c.body, c.kind) };
    } catch (err) {
      return { trap: String(err) };
    }
  }

  async reload(): Promise<void> {
    this.router = await NativeRouter.load();
    this.router.setSnapshot(this.snapshot);
  }
}

/** Judges one case's native answer; a trap or an oracle contradiction is a failure too. */
export async function checkNative(target: NativeTarget, c: FuzzCase, served: ReadonlyMap<string, ReadonlySet<string>>): Promise<Verdict> {
  const answer = target.route(c);
  if ("trap" in answer) {
    await target.reload();
    return { outcome: "trap", problem: `the module trapped: ${answer.trap}` };
  }
  try {
    return judge(answer.text, c.body, c.kind, served);
  } catch (err) {
    if (err instanceof OracleError) return { outcome: "oracle error", problem: `reference self-check: ${err.message}` };
    throw err;
  }
}

export interface NativeOptions {
  seed: number;
  count: number;
  progress?: (line: string) => void;
  progressEveryMs?: number;
}

export async function runNative(opts: NativeOptions): Promise<StageReport> {
  const report = new StageReport("native");
  const target = await NativeTarget.load(NATIVE_POOLS);
  const served = servedModels(NATIVE_POOLS);
  const every = opts.progressEveryMs ?? 3000;
  let lastProgress = Date.now();
  for (let index = 0; index < opts.count; index++) {
    const c = generateCase("native", opts.seed, index);
    const verdict = await checkNative(target, c, served);
    report.count(c, verdict.outcome);
    if (verdict.problem !== undefined) report.fail(c, verdict.problem);
    if (opts.progress && Date.now() - lastProgress >= every) {
      lastProgress = Date.now();
      opts.progress(report.progressLine(opts.count));
    }
  }
  return report;
}
