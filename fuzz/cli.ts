// `npm run fuzz -- --seed N --native 100000 --envoy 10000`: stage (a) through
// the native build, then stage (b) through a real Envoy; exits non-zero on
// any failure. `--case I` regenerates one case of a seed and shows it.
import { parseArgs } from "node:util";
import { generateCase } from "./cases.js";
import { runEnvoy } from "./envoy.js";
import { checkNative, NativeTarget, runNative } from "./native.js";
import { podReading } from "./oracle.js";
import { servedModels, STAGE_POOLS, type Stage } from "./pools.js";
import { describeCase } from "./report.js";

const USAGE = `usage: npm run fuzz -- [options]
  --seed N         seed of the run (default: random, printed)
  --native N       bodies through build/native.wasm (default 100000)
  --envoy N        bodies through a real Envoy with two workers (default 10000; 0 skips the stage)
  --concurrency N  requests in flight in the Envoy stage (default 8)
  --case I         regenerate case I of the seed, check it natively and print it
  --stage S        with --case: the stage the case comes from, native (default) or envoy
  --help`;

class UsageError extends Error {}

function count(value: string | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new UsageError(`--${name} must be a non-negative integer, got ${value}`);
  return n;
}

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        seed: { type: "string" },
        native: { type: "string" },
        envoy: { type: "string" },
        concurrency: { type: "string" },
        case: { type: "string" },
        stage: { type: "string" },
        help: { type: "boolean" },
      },
      strict: true,
    });
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  const values = parsed.values;
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const seed = count(values.seed, Math.floor(Math.random() * 0xffffffff), "seed");
  const progress = (line: string) => console.error(line);

  if (values.case !== undefined) {
    const stage = values.stage ?? "native";
    if (stage !== "native" && stage !== "envoy") throw new UsageError(`--stage must be native or envoy, got ${stage}`);
    return showCase(stage, seed, count(values.case, 0, "case"));
  }

  const nativeCount = count(values.native, 100_000, "native");
  const envoyCount = count(values.envoy, 10_000, "envoy");
  console.log(`fuzz seed ${seed}: ${nativeCount} native, ${envoyCount} through Envoy`);
  const reports = [await runNative({ seed, count: nativeCount, progress })];
  console.log(reports[0].summary());
  if (envoyCount > 0) {
    reports.push(await runEnvoy({ seed, count: envoyCount, concurrency: count(values.concurrency, 8, "concurrency"), progress }));
    console.log(reports[1].summary());
  }
  const failures = reports.reduce((n, r) => n + r.failureCount, 0);
  console.log(failures === 0 ? `fuzz seed ${seed}: no failures` : `fuzz seed ${seed}: ${failures} failures`);
  return failures === 0 ? 0 : 1;
}

/** Prints one case: its body, the server's reading and the native build's answer. */
async function showCase(stage: Stage, seed: number, index: number): Promise<number> {
  const pools = STAGE_POOLS[stage];
  const target = await NativeTarget.load(pools);
  const c = generateCase(stage, seed, index);
  const verdict = await checkNative(target, c, servedModels(pools));
  const reading = podReading(c.body);
  const headline = `[${stage}] seed ${seed} case ${index} (${c.generator}, ${c.kind}): ${verdict.problem ?? "the native build answers as the server reads the body"}`;
  console.log(describeCase(c, headline));
  console.log(`  server reads: ${reading.ok ? JSON.stringify(reading.value).slice(0, 1000) : `refused (${reading.reason})`}`);
  console.log(`  native build: ${JSON.stringify(verdict.decision ?? verdict.outcome)}`);
  return verdict.problem === undefined ? 0 : 1;
}

process.exitCode = await main(process.argv.slice(2)).catch((err: unknown) => {
  console.error(err instanceof UsageError ? `${err.message}\n${USAGE}` : err instanceof Error ? err.message : String(err));
  return 2;
});
