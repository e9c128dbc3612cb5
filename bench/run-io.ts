// What every benchmark mode writes to: the console (results on `out`,
// progress on `err`) and the generated blocks of BENCHMARKS.md and the docs.
import { readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { projectRoot } from "../host/paths.js";
import { replaceBlock } from "./report/benchmarks-md.js";

export interface Io {
  out: (text: string) => void;
  err: (text: string) => void;
  /** Whether `err` is a terminal (progress is then redrawn in place). */
  errIsTty: boolean;
}

export const defaultIo: Io = {
  out: (t) => process.stdout.write(t),
  err: (t) => process.stderr.write(t),
  errIsTty: process.stderr.isTTY === true,
};

export const BENCHMARKS_MD = join(projectRoot, "BENCHMARKS.md");

/** Rewrites one generated block of `file` (appended under `heading` if it is not there yet) and says so. */
export function updateBlock(io: Io, key: string, markdown: string, heading: string | undefined, note: string, file = BENCHMARKS_MD): void {
  writeFileSync(file, replaceBlock(readFileSync(file, "utf8"), key, markdown, heading));
  io.out(`updated ${relative(process.cwd(), file)} (${note})\n`);
}

/** The command line as a user would type it, for the record in BENCHMARKS.md. */
export function commandLine(argv: string[]): string {
  return ["npm run bench --", ...argv.map((a) => (/^[\w./:=,-]+$/.test(a) ? a : JSON.stringify(a)))].join(" ");
}

/**
 * Percent of virtual time per policy: redrawn in place on a terminal, every
 * 25% otherwise, and always so when several runs report at once (their
 * lines would interleave).
 */
export function progressReporter(io: Io, label: string, concurrent = false): (policy: string, fraction: number) => void {
  const inPlace = io.errIsTty && !concurrent;
  let lastQuarter = -1;
  // From a policy's first report: a queued run has not started.
  let started: number | undefined;
  return (policy, fraction) => {
    started ??= Date.now();
    const pct = Math.floor(fraction * 100);
    const line = `[${label}] ${policy.padEnd(14)} ${String(pct).padStart(3)}%`;
    if (fraction >= 1) {
      io.err(`${inPlace ? "\r\x1b[K" : ""}${line} in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
      started = undefined;
      lastQuarter = -1;
    } else if (inPlace) {
      io.err(`\r\x1b[K${line}`);
    } else if (Math.floor(pct / 25) > lastQuarter) {
      lastQuarter = Math.floor(pct / 25);
      io.err(`${line}\n`);
    }
  };
}
