// Large pools are ranked over a shortlist (assembly/core/scheduling/shortlist.ts):
// the pods with the best load estimates plus those an affinity scorer
// nominates. These tests hold it to what scoring every pod decides, through
// the native build: one router shortlists, a twin scores the whole pool, both
// see the same in-flight counts before every decision.
import { beforeAll, describe, expect, it } from "vitest";
import { NativeRouter } from "../../testing/native/router.js";
import type { EndpointMsg, WeightsMsg } from "../../host/proto.js";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";

let shortlisted: NativeRouter;
let whole: NativeRouter;

beforeAll(async () => {
  shortlisted = await NativeRouter.load();
  whole = await NativeRouter.load();
  whole.setFullScan(1_000_000);
});

const address = (i: number) => `10.1.${i >> 8}.${i & 255}:8000`;
const chat = (content: string, model = "llama") => JSON.stringify({ model, messages: [{ role: "user", content }] });

/** xorshift32: the same fleet every run. */
function random(seed: number): () => number {
  let x = seed;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

/** A loaded fleet of `n` pods on two GPU generations, no two alike. */
function fleet(n: number, rnd: () => number, extra: (i: number) => Partial<EndpointMsg> = () => ({})): EndpointMsg[] {
  return Array.from({ length: n }, (_, i) =>
    endpoint(address(i), {
      waiting: Math.floor(rnd() * 6),
      running: 8 + Math.floor(rnd() * 200),
      kvCacheUsage: 0.2 + rnd() * 0.75,
      capacity: i % 3 === 0 ? 0.35 : 1,
      ...extra(i),
    }));
}

function load(endpoints: EndpointMsg[], weights: Partial<WeightsMsg> = {}, adapters: string[] = []) {
  for (const r of [shortlisted, whole]) {
    r.reset(7);
    r.setSnapshot(snapshot([pool("p", "llama", endpoints, weights)], adapters));
  }
}

function picked(r: NativeRouter, body: string): string {
  const d = r.route(body);
  if (!("endpoint" in d) || d.endpoint === null) throw new Error(JSON.stringify(d));
  return d.endpoint;
}

describe("shortlist", () => {
  it("picks what scoring the whole pool picks, decision after decision, on a busy 400-pod fleet", () => {
    const rnd = random(11);
    const endpoints = fleet(400, rnd);
    load(endpoints);
    const open: string[] = [];
    let same = 0;
    const decisions = 600;
    for (let i = 0; i < decisions; i++) {
      whole.setInflight(shortlisted.inflightTable());
      // The aggregator pushes a snapshot every scrape; at 1000 requests a second, one per 50 decisions.
      if (i % 50 === 49) for (const r of [shortlisted, whole]) r.setSnapshot(snapshot([pool("p", "llama", endpoints)], [], 2 + i));
      const a = picked(shortlisted, chat("hello"));
      const b = picked(whole, chat("hello"));
      if (a === b) same++;
      open.push(a);
      // Requests end out of order, so loads rise and fall across the fleet.
      if (open.length > 150) shortlisted.endRequest({ address: open.splice(Math.floor(rnd() * open.length), 1)[0], status: 200 });
    }
    expect(same / decisions).toBeGreaterThanOrEqual(0.99);
  });

  it("keeps the best pods listed between picks exactly as walking the trees anew finds them", async () => {
    const walked = await NativeRouter.load();
    walked.setShortlistWalks(true);
    const rnd = random(5);
    const endpoints = fleet(300, rnd);
    for (const r of [shortlisted, walked]) {
      r.reset(7);
      r.setSnapshot(snapshot([pool("p", "llama", endpoints)]));
    }
    const open: string[] = [];
    for (let i = 0; i < 400; i++) {
      walked.setInflight(shortlisted.inflightTable());
      const a = picked(shortlisted, chat("hello"));
      picked(walked, chat("hello"));
      expect(shortlisted.candidates()).toEqual(walked.candidates());
      open.push(a);
      // Some requests end at once, some late: keys rise and fall, in and out of the lists.
      if (open.length > 40 || rnd() < 0.3) shortlisted.endRequest({ address: open.splice(Math.floor(rnd() * open.length), 1)[0], status: 200 });
    }
    expect(shortlisted.candidates().length).toBeGreaterThan(16);
  });

  it("finds a prefix's holder however many pods are less loaded", () => {
    const even = (i: number, first: Partial<EndpointMsg>) => endpoint(address(i), { running: 10, kvCacheUsage: 0.3, ...(i === 0 ? first : {}) });
    const prompt = "You are a contract analyst. ".repeat(120);
    for (const r of [shortlisted, whole]) {
      r.reset(7);
      // Pod 0 learns the prompt while it is the only fresh pod; then it is the busiest of 100 (the worst estimate).
      r.setSnapshot(snapshot([pool("p", "llama", Array.from({ length: 100 }, (_, i) => endpoint(address(i), { fresh: i === 0 })), { prefix: 3 })]));
      expect(picked(r, chat(prompt))).toBe(address(0));
      r.setSnapshot(snapshot([pool("p", "llama", Array.from({ length: 100 }, (_, i) => even(i, { running: 150 })), { prefix: 3 })], [], 2));
      expect(picked(r, chat(prompt + " Clause 2?"))).toBe(address(0));
    }
  });

  it("finds the one pod running an adapter, and places a cold one where scoring every pod would", () => {
    const endpoints = Array.from({ length: 120 }, (_, i) =>
      endpoint(address(i), { maxLora: 2, running: i === 77 ? 180 : 20, kvCacheUsage: 0.3, runningAdapters: i === 77 ? ["sql-lora"] : [] }));
    for (const model of ["sql-lora", "cold-lora"]) {
      load(endpoints, { lora: 4 }, ["sql-lora", "cold-lora"]);
      const b = picked(whole, chat("q", model));
      expect(picked(shortlisted, chat("q", model))).toBe(b);
      if (model === "sql-lora") expect(b).toBe(address(77));
    }
  });

  it("admits a request when only a pod outside the shortlist has room", () => {
    // Scored on KV and batch alone: 60 pods with free KV and short batches but long queues (saturated), and one
    // pod with a full batch and half its KV (the worst estimate) and no queue: the only one with room.
    const weights = { queue: 0, kvCache: 2, running: 1, lora: 0, prefix: 0 };
    const endpoints = Array.from({ length: 61 }, (_, i) =>
      i === 60
        ? endpoint(address(i), { waiting: 0, running: 256, batchSlots: 256, kvCacheUsage: 0.5 })
        : endpoint(address(i), { waiting: 40, running: 4, batchSlots: 4, kvCacheUsage: 0.05 }));
    const routed = snapshot([pool("p", "llama", endpoints, weights)]);
    const admission = {
      enabled: true, maxWaiting: 8, maxKvCache: 0.95, sheddableFactor: 0.5, criticalFactor: 2, maxRetryAfterS: 30,
      waitCriticalMs: 0, waitStandardMs: 0, waitSheddableMs: 0,
    };
    routed.profiles = [{ name: "chat", weights, admission }];
    routed.models = routed.models.map((m) => ({ ...m, profile: 0 }));
    for (const r of [shortlisted, whole]) {
      r.reset(3);
      r.setSnapshot(routed);
    }
    // Both admit it (the 60 tie, so which of them gets it is the tie-break's).
    expect(picked(whole, chat("hi"))).toMatch(/^10\.1\./);
    expect(picked(shortlisted, chat("hi"))).toMatch(/^10\.1\./);
    // With no pod left with room, both refuse alike.
    const full = structuredClone(routed);
    full.pools[0].endpoints[60].waiting = 40;
    for (const r of [shortlisted, whole]) {
      r.setSnapshot({ ...full, version: 2 });
      expect(r.route(chat("hi"))).toMatchObject({ status: 429 });
    }
  });
});
