// Counting outcomes and failures of a fuzz stage, and printing them.
import type { FuzzCase } from "./cases.js";
import type { Stage } from "./pools.js";

export interface Failure {
  stage: Stage;
  seed: number;
  index: number;
  kind: string;
  generator: string;
  problem: string;
  body: Uint8Array;
}

/** Failures printed in full (with the body); the rest are only counted. */
const KEPT_FAILURES = 20;
/** Body bytes shown per failure; --case regenerates the whole body. */
const HEX_BYTES = 4096;

export class StageReport {
  readonly outcomes = new Map<string, number>();
  readonly generators = new Map<string, number>();
  readonly failures: Failure[] = [];
  /** Failures of the stage as a whole (e.g. a worker that stopped serving), not of one body. */
  readonly stageProblems: string[] = [];
  /** What the stage-level checks found when they passed. */
  readonly notes: string[] = [];
  failureCount = 0;
  cases = 0;
  private readonly started = Date.now();

  constructor(readonly stage: Stage) {}

  count(c: FuzzCase, outcome: string): void {
    this.cases++;
    this.outcomes.set(outcome, (this.outcomes.get(outcome) ?? 0) + 1);
    this.generators.set(c.generator, (this.generators.get(c.generator) ?? 0) + 1);
  }

  fail(c: FuzzCase, problem: string): void {
    this.failureCount++;
    if (this.failures.length < KEPT_FAILURES) {
      this.failures.push({ stage: this.stage, seed: c.seed, index: c.index, kind: c.kind, generator: c.generator, problem, body: c.body });
    }
  }

  failStage(problem: string): void {
    this.failureCount++;
    this.stageProblems.push(problem);
  }

  elapsedS(): number {
    return (Date.now() - this.started) / 1000;
  }

  progressLine(total: number): string {
    return `${this.stage}: ${this.cases.toLocaleString("en")}/${total.toLocaleString("en")} in ${this.elapsedS().toFixed(0)} s, failures ${this.failureCount}`;
  }

  summary(): string {
    const lines = [`${this.stage}: ${this.cases.toLocaleString("en")} bodies in ${this.elapsedS().toFixed(1)} s, ${this.failureCount} failures`];
    for (const [name, n] of [...this.outcomes].sort((a, b) => b[1] - a[1])) lines.push(`  ${String(n).padStart(8)}  ${name}`);
    for (const note of this.notes) lines.push(`  ${note}`);
    lines.push("  by generator: " + [...this.generators].sort((a, b) => b[1] - a[1]).map(([g, n]) => `${g} ${n}`).join(", "));
    for (const p of this.stageProblems) lines.push(`FAIL [${this.stage}] ${p}`);
    for (const f of this.failures) lines.push(describeFailure(f));
    const unlisted = this.failureCount - this.failures.length - this.stageProblems.length;
    if (unlisted > 0) lines.push(`  ... and ${unlisted} more failures`);
    return lines.join("\n");
  }
}

export function describeFailure(f: Failure): string {
  return describeCase(f, `FAIL [${f.stage}] seed ${f.seed} case ${f.index} (${f.generator}, ${f.kind}): ${f.problem}`);
}

/** A headline, how to regenerate the case, and its body in hex. */
export function describeCase(c: Omit<Failure, "problem">, headline: string): string {
  const hex = Buffer.from(c.body.subarray(0, HEX_BYTES)).toString("hex");
  return [
    headline,
    `  reproduce: npm run fuzz -- --seed ${c.seed} --case ${c.index} --stage ${c.stage}`,
    `  body (${c.body.length} bytes${c.body.length > HEX_BYTES ? `, first ${HEX_BYTES} shown` : ""}): ${hex}`,
  ].join("\n");
}
