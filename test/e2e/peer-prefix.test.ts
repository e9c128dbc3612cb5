// Two real Envoys on one aggregator share their prefix placements through
// it: a prompt with a long prefix sent through Envoy A lands on some pod, and
// a prompt with the same prefix sent through Envoy B, which never routed it,
// goes to that pod too. The pods are alike and idle and scrapes far apart,
// so only the shared placement can tell B (alone B would pick among its own
// lean's share of the four pods: it has to hold for several prefixes in a
// row). Without the link applying peers' records this test fails.
import { afterAll, beforeAll, expect, it } from "vitest";
import { SYSTEM } from "../../testing/fixtures/workers.js";
import { startReplicaEnvoy, type ReplicaEnvoy } from "../helpers/replica-envoy.js";
import { startTestStack, waitFor, type TestStack } from "../helpers/stack.js";

let stack: TestStack;
let a: ReplicaEnvoy | null = null;

beforeAll(async () => {
  stack = await startTestStack(
    [{ name: "llama", baseModel: "llama-3.1-8b", weights: { queue: 0, kvCache: 0, running: 0, lora: 0, prefix: 1 },
      pods: ["pod-a", "pod-b", "pod-c", "pod-d"].map((name) => ({ name })) }],
    {},
    { metricsPort: 0 },
    { scrapeIntervalMs: 60_000, staleAfterMs: 180_000 },
  );
  a = await startReplicaEnvoy(stack);
});

afterAll(async () => {
  await a?.close();
  await stack?.close();
});

/** A prompt whose long system part starts with `topic`: prompts of one topic share a prefix, of two none. */
const body = (topic: string, user: string) =>
  JSON.stringify({ model: "llama-3.1-8b", messages: [{ role: "system", content: `${topic}: ${SYSTEM}` }, { role: "user", content: user }], max_tokens: 1 });

/** One request through the Envoy at `url`: the pod that served it. */
async function served(url: string, topic: string, user: string): Promise<string> {
  const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: body(topic, user) });
  await r.arrayBuffer();
  expect(r.status).toBe(200);
  return r.headers.get("x-served-by") ?? "";
}

/** Bytes of prefix records the aggregator has fanned out so far. */
async function fannedOut(): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${stack.aggregator.metricsPort}/metrics`)).text();
  return Number(/^llm_gateway_peer_prefix_bytes_total\{direction="fanout"\} (\d+)/m.exec(text)?.[1] ?? 0);
}

it("sends a prefix through Envoy B to the pod Envoy A placed it on, though B never routed it", async () => {
  const urlA = a!.url;
  const urlB = stack.gatewayUrl;
  // Both Envoys route (a few in a row, so both workers of each hold a snapshot), on prefixes of their own.
  for (const url of [urlA, urlB]) {
    let ok = 0;
    await waitFor(`${url} routing`, async () => {
      ok = (await served(url, `warm-up ${url} ${ok}`, "hi").catch(() => "")) ? ok + 1 : 0;
      return ok >= 4;
    }, 20_000);
  }
  // Their warm-up placements have been fanned out: from here on the counter moves only for the records below.
  let last = -1;
  await waitFor("the warm-up records fanned out", async () => {
    const now = await fannedOut();
    const settled = now > 0 && now === last;
    last = now;
    return settled;
  }, 10_000);

  // Each round: a new prefix through A, then (once the aggregator has sent it on) the same prefix through B.
  // A round B answers first (its worker's tick not yet come) starts the count again.
  let inARow = 0;
  let round = 0;
  await waitFor("B following A's placements", async () => {
    const topic = `topic ${round++}`;
    const before = await fannedOut();
    const placed = await served(urlA, topic, "first question");
    let afterA = before;
    await waitFor("A's record fanned out", async () => (afterA = await fannedOut()) > before, 5_000);
    const followed = await served(urlB, topic, "second question");
    inARow = followed === placed ? inARow + 1 : 0;
    // B's own record (of the same prefix: as long as A's) goes to A in turn: the next round's count starts after it.
    await waitFor("B's record fanned out", async () => (await fannedOut()) >= afterA + (afterA - before), 5_000);
    return inARow >= 5;
  }, 15_000);
});
