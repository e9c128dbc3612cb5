// Two real Envoys on one aggregator share their requests in flight through
// it: a request held open through Envoy A counts in Envoy B's picks within
// the share interval (B steers away from A's pod though no scrape shows the
// load), and once A is gone its count is forgotten (B uses that pod again).
// The aggregator numbers the two (each leans by it toward its own share of
// pods that score alike: test/unit/replica-lean.test.ts), and B alone again.
import { afterAll, beforeAll, expect, it } from "vitest";
import { startReplicaEnvoy, type ReplicaEnvoy } from "../helpers/replica-envoy.js";
import { startTestStack, waitFor, type TestStack } from "../helpers/stack.js";

let stack: TestStack;
let a: ReplicaEnvoy | null = null;

// Scrapes far apart: the snapshot never shows A's request as running, so only the sharing can tell B of it.
beforeAll(async () => {
  stack = await startTestStack(
    [{ name: "llama", baseModel: "llama-3.1-8b", weights: { queue: 0, kvCache: 0, running: 1, lora: 0, prefix: 0 },
      pods: [{ name: "pod-x", engineConfig: { speed: 0.1 } }, { name: "pod-y", engineConfig: { speed: 0.1 } }] }],
    {},
    {},
    { scrapeIntervalMs: 60_000, staleAfterMs: 180_000 },
  );
  a = await startReplicaEnvoy(stack);
});

afterAll(async () => {
  await a?.close();
  await stack?.close();
});

const body = (maxTokens: number, stream: boolean) =>
  JSON.stringify({ model: "llama-3.1-8b", messages: [{ role: "user", content: "hello" }], max_tokens: maxTokens, stream });

/** A short request through B: the pod that served it. */
async function servedThroughB(): Promise<string> {
  const r = await fetch(`${stack.gatewayUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: body(1, false) });
  await r.arrayBuffer();
  expect(r.status).toBe(200);
  return r.headers.get("x-served-by") ?? "";
}

async function routesOn(url: string): Promise<boolean> {
  const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: body(1, false) }).catch(() => null);
  if (!r) return false;
  await r.arrayBuffer();
  return r.status === 200;
}

/** The Envoy's place among the sharing replicas, from its admin stats: "index/count". */
async function placeOf(adminUrl: string): Promise<string> {
  const text = await (await fetch(`${adminUrl}/stats?filter=replica`)).text();
  const gauge = (name: string) => /: (\d+)/.exec(text.split("\n").find((l) => l.includes(`llm_gateway.${name}:`)) ?? "")?.[1] ?? "?";
  return `${gauge("replica_index")}/${gauge("replicas_sharing")}`;
}

it("numbers the two Envoys apart", async () => {
  const adminA = a!.envoy.adminUrl;
  const adminB = stack.envoy.adminUrl;
  await waitFor("both Envoys numbered", async () => {
    const places = [await placeOf(adminA), await placeOf(adminB)].sort();
    return places[0] === "0/2" && places[1] === "1/2";
  }, 20_000);
});

it("counts a request open through Envoy A in Envoy B's picks, and forgets it (and B's share) once A is gone", async () => {
  const urlA = a!.url;
  // Both Envoys hold a snapshot on every worker (a few in a row, so both workers answered).
  for (const url of [urlA, stack.gatewayUrl]) {
    let ok = 0;
    await waitFor(`${url} routing`, async () => (ok = (await routesOn(url)) ? ok + 1 : 0) >= 4, 20_000);
  }

  // A long stream through A, held open past its first bytes.
  const held = await fetch(`${urlA}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: body(400, true) });
  expect(held.status).toBe(200);
  const busy = held.headers.get("x-served-by")!;
  const reader = held.body!.getReader();
  await reader.read();
  const idle = busy === "pod-x" ? "pod-y" : "pod-x";

  // Within the share interval (plus B's tick) B's workers count it: every short request of B goes to the other pod.
  let inARow = 0;
  await waitFor("B steering away from A's busy pod", async () => {
    inARow = (await servedThroughB()) === idle ? inARow + 1 : 0;
    return inARow >= 8;
  }, 15_000);

  // A goes away with its request open: the aggregator forgets its count, and B uses that pod again (a tie, broken either way).
  await a!.envoy.stop();
  await reader.cancel().catch(() => {});
  await waitFor("B routing to A's pod again", async () => (await servedThroughB()) === busy, 15_000);
  await waitFor("B numbered alone", async () => (await placeOf(stack.envoy.adminUrl)) === "0/0", 15_000);
});
