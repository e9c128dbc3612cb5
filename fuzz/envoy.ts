// Stage (b): bodies through a real Envoy (two workers) running
// build/filter.wasm in front of fake pods. Every answer must be the native
// build's decision for the same body: either routed to a pod of the model's
// pool that read the same model (x-fake-parsed-model), or the very same
// OpenAI error. At the end: no Wasm failure in Envoy's logs or stats, and
// every worker still serves.
import http from "node:http";
import { generateCase } from "./cases.js";
import { checkNative, NativeTarget } from "./native.js";
import { sameError, type Decision, type OpenAIError } from "./oracle.js";
import { ENVOY_POOLS, servedModels, type PoolSpec } from "./pools.js";
import { StageReport } from "./report.js";
import { startFuzzStack, type FuzzStack } from "./stack.js";

export interface EnvoyOptions {
  seed: number;
  count: number;
  /** Requests in flight at once, over as many keep-alive connections. */
  concurrency?: number;
  workers?: number;
  progress?: (line: string) => void;
  progressEveryMs?: number;
}

const REQUEST_TIMEOUT_MS = 30_000;
const LOG_POLL_MS = 200;
/** Log lines that may mean a Wasm VM failed; Envoy logs a trap as "wasm ... RuntimeError: unreachable". */
const SUSPICIOUS = /wasm|abort|trap|unreachable|panic|RuntimeError|stack overflow|out of memory/i;
const PATHS = { chat: "/v1/chat/completions", completions: "/v1/completions" } as const;

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export async function runEnvoy(opts: EnvoyOptions): Promise<StageReport> {
  const report = new StageReport("envoy");
  const concurrency = opts.concurrency ?? 8;
  const stack = await startFuzzStack(opts.workers ?? 2);
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  const suspicious = new Set<string>();
  const watchLogs = () => {
    for (const line of stack.envoy.recentLogs()) if (SUSPICIOUS.test(line)) suspicious.add(line);
  };
  const logTimer = setInterval(watchLogs, LOG_POLL_MS);
  const progressTimer = setInterval(() => opts.progress?.(report.progressLine(opts.count)), opts.progressEveryMs ?? 3000);
  try {
    await waitForSnapshot(stack);
    // The native build gets the same names, with the pods' addresses as endpoints.
    const pools: PoolSpec[] = ENVOY_POOLS.map((p) => ({ ...p, endpoints: p.endpoints.map((pod) => stack.fleet.pod(pod).address) }));
    const served = servedModels(pools);
    const podsOf = servedModels(ENVOY_POOLS);
    const target = await NativeTarget.load(pools);
    const url = new URL(stack.gatewayUrl);

    let next = 0;
    const worker = async () => {
      while (next < opts.count) {
        const c = generateCase("envoy", opts.seed, next++);
        const verdict = await checkNative(target, c, served);
        if (verdict.problem !== undefined || verdict.decision === undefined) {
          report.count(c, verdict.outcome);
          report.fail(c, `native: ${verdict.problem}`);
          continue;
        }
        let answer: Answer;
        try {
          answer = await post(agent, url, PATHS[c.kind as keyof typeof PATHS], c.body);
        } catch (err) {
          report.count(c, "request error");
          report.fail(c, `request failed: ${String(err)}`);
          continue;
        }
        const { outcome, problem } = compare(verdict.decision, verdict.outcome, answer, podsOf);
        report.count(c, outcome);
        if (problem !== undefined) report.fail(c, problem);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));

    watchLogs();
    for (const line of suspicious) report.failStage(`Envoy log: ${line}`);
    const reloads = Object.entries(await stack.envoy.stats("wasm")).filter(([name]) => /vm_reload/.test(name));
    for (const [name, value] of reloads) if (value !== 0) report.failStage(`Envoy stat ${name} = ${value}`);
    if (suspicious.size === 0) report.notes.push(`Envoy log: no line about wasm, abort, trap or unreachable; ${reloads.map(([n, v]) => `${n}=${v}`).join(", ")}`);
    const serving = await everyWorkerServes(stack, opts.workers ?? 2);
    if (typeof serving === "string") report.notes.push(serving);
    else for (const problem of serving) report.failStage(problem);
  } finally {
    clearInterval(logTimer);
    clearInterval(progressTimer);
    agent.destroy();
    await stack.close();
  }
  return report;
}

/** Checks Envoy's answer against the native decision for the same body. */
function compare(decision: Decision, nativeOutcome: string, answer: Answer, podsOf: ReadonlyMap<string, ReadonlySet<string>>): { outcome: string; problem?: string } {
  const text = answer.body.toString("utf8");
  const servedBy = answer.headers["x-served-by"];
  if (!("endpoint" in decision)) {
    const outcome = nativeOutcome;
    if (servedBy !== undefined) return { outcome, problem: `the native build answers ${decision.status}, but pod ${servedBy} answered ${answer.status}` };
    if (answer.status !== decision.status) return { outcome, problem: `expected ${decision.status} like the native build, got ${answer.status}: ${text.slice(0, 300)}` };
    const error = openAIError(answer.body);
    if (error === null) return { outcome, problem: `not an OpenAI error in valid UTF-8 JSON: ${text.slice(0, 300)}` };
    if (!sameError(error, decision.error)) return { outcome, problem: `error differs from the native build's ${JSON.stringify(decision.error)}: ${JSON.stringify(error)}` };
    return { outcome };
  }
  if (typeof servedBy !== "string") {
    return { outcome: `no pod, gateway answered ${answer.status}`, problem: `expected routing of model ${JSON.stringify(decision.model)}, got ${answer.status}: ${text.slice(0, 300)}` };
  }
  const outcome = `routed, pod answered ${answer.status}`;
  if (!podsOf.get(decision.model)?.has(servedBy)) return { outcome, problem: `pod ${servedBy} does not serve ${JSON.stringify(decision.model)}` };
  const parsed = answer.headers["x-fake-parsed-model"];
  if (parsed !== encodeURIComponent(decision.model)) {
    return { outcome, problem: `the gateway read model ${JSON.stringify(decision.model)}, the pod read ${JSON.stringify(parsed)} (percent-encoded)` };
  }
  if (answer.status === 200) {
    if (decision.stream) {
      if (!String(answer.headers["content-type"]).startsWith("text/event-stream") || !text.endsWith("data: [DONE]\n\n")) {
        return { outcome, problem: `expected a complete event stream: ${text.slice(-300)}` };
      }
    } else if (jsonModel(text) !== decision.model) {
      return { outcome, problem: `expected a completion for ${JSON.stringify(decision.model)}: ${text.slice(0, 300)}` };
    }
  } else if (openAIError(answer.body) === null) {
    return { outcome, problem: `pod answered ${answer.status} without an OpenAI error: ${text.slice(0, 300)}` };
  }
  return { outcome };
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

function jsonModel(text: string): unknown {
  try {
    return (JSON.parse(text) as { model?: unknown }).model;
  } catch {
    return undefined;
  }
}

function openAIError(body: Buffer): OpenAIError | null {
  try {
    const e = (JSON.parse(strictUtf8.decode(body)) as { error?: OpenAIError }).error;
    return e && typeof e.message === "string" && typeof e.type === "string" ? e : null;
  } catch {
    return null;
  }
}

function post(agent: http.Agent | false, url: URL, path: string, body: Uint8Array): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        method: "POST",
        path,
        agent,
        headers: { "content-type": "application/json", "content-length": body.length },
        timeout: REQUEST_TIMEOUT_MS,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer within ${REQUEST_TIMEOUT_MS} ms`)));
    req.on("error", reject);
    req.end(body);
  });
}

/** Waits until Envoy holds the aggregator's snapshot with every pod fresh, so no body meets a 503. */
async function waitForSnapshot(stack: FuzzStack): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const snap = stack.aggregator.current();
    const fresh = snap.pools.every((p) => p.endpoints.every((e) => e.fresh));
    const loaded = (await stack.envoy.stats("llm_gateway"))["wasmcustom.llm_gateway.snapshot_version"] ?? 0;
    if (fresh && snap.version > 0 && loaded >= snap.version) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("Envoy did not load a snapshot with every pod fresh within 20 s");
}

/**
 * New connections until each worker's listener counter has moved, each with
 * a valid request that must be routed: proof every worker's VM still serves.
 * A note when they all did, else the problems.
 */
async function everyWorkerServes(stack: FuzzStack, workers: number): Promise<string | string[]> {
  const perWorker = async () => {
    const counts = new Map<string, number>();
    for (const [name, value] of Object.entries(await stack.envoy.stats("downstream_cx_total"))) {
      const m = /^listener\..*\.(worker_\d+)\.downstream_cx_total$/.exec(name);
      if (m) counts.set(m[1], (counts.get(m[1]) ?? 0) + value);
    }
    return counts;
  };
  const before = await perWorker();
  if (before.size !== workers) return [`expected ${workers} workers in Envoy's listener stats, found ${before.size}`];
  const body = Buffer.from(JSON.stringify({ model: ENVOY_POOLS[0].baseModel, messages: [{ role: "user", content: "still there?" }], max_tokens: 1 }));
  const url = new URL(stack.gatewayUrl);
  for (let attempt = 1; attempt <= 100; attempt++) {
    const answer = await post(false, url, PATHS.chat, body).catch((err: unknown) => String(err));
    if (typeof answer === "string" || answer.status !== 200 || answer.headers["x-fake-parsed-model"] !== ENVOY_POOLS[0].baseModel) {
      return [`a valid request after the run failed: ${typeof answer === "string" ? answer : `${answer.status} ${answer.body.toString().slice(0, 200)}`}`];
    }
    const after = await perWorker();
    if ([...before].every(([w, n]) => (after.get(w) ?? 0) > n)) {
      return `after the run, valid requests on ${attempt} new connections were routed by every worker (${[...after.keys()].join(", ")})`;
    }
  }
  return [`not every worker took a connection in 100 attempts: ${JSON.stringify(Object.fromEntries(await perWorker()))}`];
}
