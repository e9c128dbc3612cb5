// Gateway replicas in the simulator: the front's split of the attempts, one
// replica being exactly today's single gateway, replicas sharing only what
// the run shares, and the --replicas command.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { runBench } from "../../bench/command.js";
import type { Policy, PolicyEnv, PolicySpec, RouteRequest } from "../../bench/policies/index.js";
import type { ReplicaRow } from "../../bench/report/replicas-table.js";
import { parseScenario } from "../../bench/scenario.js";
import { EventQueue } from "../../bench/sim/events.js";
import { SimFleet } from "../../bench/sim/fleet.js";
import { shareGatewayState } from "../../bench/sim/replica-state.js";
import { NativeRouter } from "../../testing/native/router.js";
import { behindFront, createGateways, roundRobinFront } from "../../bench/sim/replicas.js";
import { periodicSharing } from "../../bench/sim/state-sharing.js";
import { A, B, C, endpoint, SYSTEM, Workers } from "../../testing/fixtures/workers.js";
import { runSim } from "../../bench/sim/simulator.js";
import { generateTrace, type TraceRequest } from "../../bench/sim/workload.js";

const SMALL = parseScenario(
  `
description: four pods, shared prefixes, a slow one
durationS: 20
models: [{ name: m }]
fleet:
  - { name: fast, model: m, count: 3, speed: 1.0 }
  - { name: slow, model: m, count: 1, speed: 0.4 }
arrivals: { pattern: poisson, rate: 8 }
sharedPrefix: { fraction: 0.6, groups: 4, tokens: 400 }
prompt: { dist: lognormal, median: 300, sigma: 0.5, min: 16, max: 1500 }
output: { dist: lognormal, median: 40, sigma: 0.5, min: 4, max: 200 }
`,
  "small",
  "small",
);

const request = (index: number) => ({ request: { index } as TraceRequest }) as RouteRequest;

/** A policy that remembers what it was asked to route and the env it was made with. */
function recorder(): { spec: PolicySpec; made: Array<{ env: PolicyEnv; routed: number[]; policy: Policy }> } {
  const made: Array<{ env: PolicyEnv; routed: number[]; policy: Policy }> = [];
  const spec: PolicySpec = {
    name: "recorder",
    description: "records its requests",
    create(env) {
      const routed: number[] = [];
      const policy: Policy = {
        decisionDelayMs: 0,
        route(req) {
          routed.push(req.request.index);
          return { pod: env.replica.index };
        },
      };
      made.push({ env, routed, policy });
      return policy;
    },
  };
  return { spec, made };
}

/** Runs the queue's events up to time t. */
function runUntil(queue: EventQueue, t: number): void {
  for (let at = queue.peekTime(); at <= t; at = queue.peekTime()) queue.pop()!.fn(at);
}

/** Two replicas of one worker each, sharing through a modelled control plane every 50 ms, 2 ms each way. */
async function sharingPair(): Promise<{ queue: EventQueue; replicas: Workers[] }> {
  const queue = new EventQueue();
  const sharing = periodicSharing(queue, { intervalMs: 50, oneWayMs: 2 });
  const replicas = [await Workers.start(1), await Workers.start(1)];
  const links = [await NativeRouter.load(), await NativeRouter.load()];
  replicas.forEach((w, i) => {
    w.fresh();
    // Independent Envoys: distinct writer ids on the prefix log.
    w.routers[0].reset(300 + i);
    shareGatewayState(sharing, i, w.shared, links[i]);
  });
  return { queue, replicas };
}

function env(): Omit<PolicyEnv, "replica"> {
  const trace = generateTrace(SMALL, 1);
  return { scenario: SMALL, trace, fleet: new SimFleet(SMALL, trace.requests), queue: new EventQueue(), seed: 11 };
}

describe("gateway replicas in the simulator", () => {
  it("the round-robin front sends attempts to the replicas in turn, so each gets its share of every stretch of arrivals", () => {
    const front = roundRobinFront(4);
    const picks = Array.from({ length: 22 }, (_, i) => front.pick({ index: i } as TraceRequest));
    expect(picks.slice(0, 8)).toEqual([0, 1, 2, 3, 0, 1, 2, 3]);
    const counts = [0, 1, 2, 3].map((r) => picks.filter((p) => p === r).length);
    expect(counts).toEqual([6, 6, 5, 5]);
    const single = roundRobinFront(1);
    expect(Array.from({ length: 5 }, () => single.pick({ index: 0 } as TraceRequest))).toEqual([0, 0, 0, 0, 0]);
  });

  it("each replica routes only the attempts the front gave it, a retry taking the next turn", async () => {
    const { spec, made } = recorder();
    const gateways = await createGateways(spec, env(), { count: 3 });
    const decided = [0, 1, 2, 3, 4, 5, 6].map((i) => gateways.route(request(i), i));
    // The retry of request 1 is a new request at the front.
    gateways.route(request(1), 10);
    expect(made.map((m) => m.routed)).toEqual([[0, 3, 6], [1, 4, 1], [2, 5]]);
    expect(decided).toEqual([0, 1, 2, 0, 1, 2, 0].map((pod) => ({ pod })));
  });

  it("one replica is the policy itself, with the run's seed; more get seeds of their own and share what the run makes once", async () => {
    const one = recorder();
    const base = env();
    const alone = await createGateways(one.spec, base, { count: 1 });
    expect(alone).toBe(one.made[0].policy);
    expect(one.made[0].env.seed).toBe(base.seed);

    const many = recorder();
    await createGateways(many.spec, base, { count: 4 });
    const seeds = many.made.map((m) => m.env.seed);
    expect(seeds[0]).toBe(base.seed);
    expect(new Set(seeds).size).toBe(4);
    let makes = 0;
    const planes = many.made.map((m) => m.env.replica.runWide("plane", () => ({ n: ++makes })));
    expect(makes).toBe(1);
    expect(new Set(planes).size).toBe(1);
    expect(many.made.map((m) => [m.env.replica.index, m.env.replica.count, m.env.replica.runSeed])).toEqual([0, 1, 2, 3].map((i) => [i, 4, base.seed]));
  });

  it("releases a held request through whichever replica held it", async () => {
    const released: number[] = [];
    const handlers: Array<(r: TraceRequest) => void> = [];
    const holder = (): Policy => ({
      decisionDelayMs: 0,
      route: () => ({ held: true }),
      onRelease(handler) {
        handlers.push((r) => handler(r, { pod: 0 }, 0));
      },
    });
    const front = behindFront([holder(), holder()], roundRobinFront(2));
    front.onRelease!((r) => released.push(r.index));
    handlers[1]({ index: 9 } as TraceRequest);
    expect(released).toEqual([9]);
    expect(() => behindFront([holder(), { ...holder(), decisionDelayMs: 1 }], roundRobinFront(2))).toThrow(/decision delays/);
  });

  it("with one replica a run is byte-identical to the single gateway's, and carries no replica field", async () => {
    const policies = ["ours:default", "round-robin", "reference"];
    const today = await runSim(SMALL, { seed: 5, policies });
    const one = await runSim(SMALL, { seed: 5, policies, replicas: 1 });
    expect(JSON.stringify(one)).toBe(JSON.stringify(today));
    expect(today).not.toHaveProperty("replicas");
  });

  it("several replicas of ours complete every request, each on its own state, and differ from one gateway", async () => {
    const one = await runSim(SMALL, { seed: 5, policies: ["ours:default"] });
    const four = await runSim(SMALL, { seed: 5, policies: ["ours:default"], replicas: 4 });
    expect(four.replicas).toEqual({ count: 4, front: "round-robin", sharing: "none" });
    const [a, b] = [one.policies[0], four.policies[0]];
    expect(b.completed).toBe(b.requests);
    expect(b.requests).toBe(a.requests);
    expect(JSON.stringify(b.perPod)).not.toBe(JSON.stringify(a.perPod));
  });

  it("--replicas runs each scenario per replica count and seed and writes the tables", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bench-replicas-"));
    const out: string[] = [];
    const err: string[] = [];
    const io = { out: (t: string) => out.push(t), err: (t: string) => err.push(t), errIsTty: false };
    const args = ["--scenario", "uniform-steady", "--replicas", "1,2", "--seeds", "1,2", "--duration", "5", "--policies", "ours:default", "--jobs", "1", "--out", dir];
    expect(await runBench(args, io), err.join("")).toBe(0);
    const { rows } = JSON.parse(readFileSync(join(dir, "replicas", "replicas.json"), "utf8")) as { rows: ReplicaRow[] };
    expect(rows.map((r) => [r.scenario, r.policy, r.replicas, r.seeds])).toEqual([
      ["uniform-steady", "ours:default", 1, [1, 2]],
      ["uniform-steady", "ours:default", 2, [1, 2]],
    ]);
    expect(rows[0].vsOne).toEqual({ p95: { mean: 0, min: 0, max: 0 }, p99: { mean: 0, min: 0, max: 0 } });
    expect(rows[1].vsOne).not.toBeNull();
    // One row per scenario and policy: a column per replica count, the change against one in brackets.
    expect(readFileSync(join(dir, "replicas", "replicas.md"), "utf8")).toMatch(/^\| uniform-steady \| ours:default \| [^|(]+ \| [^|(]+ \([^|]+ \/ [^|]+\) \|$/m);
    expect(out.join("")).toContain("p95 vs 1 replica");

    err.length = 0;
    expect(await runBench(["--scenario", "uniform-steady", "--replicas", "1,0"], io)).toBe(2);
    expect(await runBench(["--scenario", "uniform-steady", "--replicas", "2,2"], io)).toBe(2);
    expect(await runBench(["--scenario", "uniform-steady", "--replicas", "2", "--mode", "live"], io)).toBe(2);
    expect(err.join("")).toMatch(/--replicas: expected integers 1\.\.64[\s\S]*--replicas: a value is repeated[\s\S]*--replicas: needs --scenario NAME or --all, in sim mode/);
  });

  it("periodic sharing sends each replica the others' reports of a round, after the trip there and back", () => {
    const queue = new EventQueue();
    const sharing = periodicSharing(queue, { intervalMs: 50, oneWayMs: 3 });
    const got: Array<[number, number, number[]]> = [];
    for (const r of [0, 1, 2]) sharing.join<number>("n", r, { report: (t) => r * 1000 + t, receive: (others, t) => got.push([r, t, [...others]]) });
    runUntil(queue, 106);
    expect(got).toEqual([
      [0, 56, [1050, 2050]],
      [1, 56, [50, 2050]],
      [2, 56, [50, 1050]],
      [0, 106, [1100, 2100]],
      [1, 106, [100, 2100]],
      [2, 106, [100, 1100]],
    ]);
  });

  it("sharing through the aggregator's merge: a replica counts the others' requests in flight once a round reached its workers' tick, and their end (once the sender's tick published it) the round after", async () => {
    const { queue, replicas } = await sharingPair();
    for (const w of replicas) w.install([endpoint(A), endpoint(B)], { running: 1 });
    const [r0, r1] = replicas;
    const sent = [r0.route(0, JSON.stringify({ model: "llama", messages: [{ role: "user", content: "one" }] }))];
    expect(r1.count(sent[0])).toBe(0);
    runUntil(queue, 54);
    r1.tick();
    expect(r1.count(sent[0])).toBe(1);
    // Its own count is its own: not doubled by the round.
    expect(r0.count(sent[0])).toBe(1);
    const other = sent[0] === A ? B : A;
    expect(r1.route(0, JSON.stringify({ model: "llama", messages: [{ role: "user", content: "two" }] }))).toBe(other);
    r0.release(0, sent[0]);
    // The release reaches the replica's shared table on its worker's tick, which the next report reads.
    r0.tick();
    runUntil(queue, 104);
    r0.tick();
    r1.tick();
    expect(r1.count(sent[0])).toBe(0);
    expect(r0.count(other)).toBe(1);
    // A release touches the own count only: the peers' one stays as sent.
    r0.release(0, other);
    expect(r0.count(other)).toBe(1);
  });

  it("sharing through the links and the aggregator's prefix merge: a replica learns where the others placed a prefix, and sends the same prefix there", async () => {
    const { queue, replicas } = await sharingPair();
    for (const w of replicas) w.install([endpoint(A), endpoint(B), endpoint(C)], { prefix: 1 });
    const [r0, r1] = replicas;
    const body = (k: number, user: string) => JSON.stringify({ model: "llama", messages: [{ role: "system", content: `tenant ${k}: ${SYSTEM}` }, { role: "user", content: user }] });
    const placed = [0, 1, 2, 3].map((k) => r0.route(0, body(k, "first")));
    r0.tick();
    runUntil(queue, 54);
    r1.tick();
    expect([0, 1, 2, 3].map((k) => r1.route(0, body(k, "second")))).toEqual(placed);
  });
});
