// A real model server behind the real gateway: three llama.cpp servers
// (llama-server built from source, a tiny random-weight llama), scraped as
// `engine: llamacpp`, through Envoy with the filter and the official OpenAI
// client. Their scheduling, slots, prompt cache and metrics are the engine's
// own; only the generated text is noise.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../helpers/stack.js";
import { MODEL, skipWithoutLlamacpp, startLlamaStack, upstreamRequests, type LlamaStack } from "../helpers/llamacpp.js";

const SUITE = "real llama.cpp pods";

describe.skipIf(skipWithoutLlamacpp(SUITE))(SUITE, () => {
  let real: LlamaStack;
  let client: OpenAI;

  beforeAll(async () => {
    real = await startLlamaStack(3, {
      gateway: { passiveHealth: { ejectAfterFailures: 2, ejectMs: 3_000 } },
      profile: {
        // A frozen pod is noticed in a second, not in the built-in 20 s.
        deadlines: { firstByteMs: 1_000, promptMsPerKToken: 1, outputMsPerToken: 10, assumedOutputTokens: 16, streamIdleMs: 1_000 },
        // These tests are about routing and failover on real servers. Seven llama-servers
        // sharing CI's two cores finish a request every few seconds, so admission would
        // (by its measured drain) refuse the short requests queued behind the long
        // generations of the kill test; its own tests run on the fakes and the simulator.
        admission: { enabled: false },
      },
    });
    client = new OpenAI({ baseURL: `${real.stack.gatewayUrl}/v1`, apiKey: "x", maxRetries: 0, timeout: 20_000 });
    await waitFor("every pod fresh in the aggregator's view", () =>
      real.stack.aggregator.current().pools[0].endpoints.filter((e) => e.fresh).length === 3,
    );
  }, 120_000);
  afterAll(async () => {
    for (const p of real?.pods ?? []) p.signal("SIGCONT");
    await real?.close();
  });

  const ask = (content: string, max_tokens = 4) =>
    client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content }], max_tokens });

  /** Non-streamed asks, each an HTTP status (0: no answer). */
  const statuses = (n: number, tag: string) =>
    Promise.all(Array.from({ length: n }, (_, i) => ask(`${tag} ${i} ${Math.random()}`).then(() => 200, (e: { status?: number }) => e.status ?? 0)));

  it("reads the servers' own metrics: slots from the config, busy slots while a generation runs", async () => {
    const view = real.stack.aggregator.current().pools[0].endpoints;
    expect(view.map((e) => e.address).sort()).toEqual(real.pods.map((p) => p.address).sort());
    expect(view.every((e) => e.batchSlots === 2 && e.kvCacheUsage === 0)).toBe(true);
    // A long generation occupies a slot; the scrape sees it as running.
    const long = ask("count slowly", 4000);
    await waitFor("a pod to report a busy slot", () => real.stack.aggregator.current().pools[0].endpoints.some((e) => e.running >= 1), 20_000);
    await long;
  }, 60_000);

  it("routes a chat completion to a pod and returns its usage", async () => {
    const { data, response } = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: "user", content: "Hello there" }], max_tokens: 5 })
      .withResponse();
    expect(response.status).toBe(200);
    expect(response.headers.get("server")).not.toBe("llama.cpp"); // Envoy answers the client
    expect(data.usage?.completion_tokens).toBe(5);
    expect(data.usage?.prompt_tokens).toBeGreaterThan(5);
    expect(data.choices[0].finish_reason).toBe("length");
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toContain(MODEL);
  });

  it("streams with usage in the last chunk, prompt-cache reuse included", async () => {
    const system = "You are a careful assistant. ".repeat(20);
    const stream = (user: string) =>
      client.chat.completions.create({
        model: MODEL,
        messages: [{ role: "system", content: system }, { role: "user", content: user }],
        max_tokens: 6,
        stream: true,
        stream_options: { include_usage: true },
      });
    const read = async (s: Awaited<ReturnType<typeof stream>>) => {
      let text = 0;
      let usage: OpenAI.CompletionUsage | undefined;
      for await (const chunk of s) {
        if (chunk.choices[0]?.delta?.content !== undefined) text++;
        if (chunk.usage) usage = chunk.usage;
      }
      return { text, usage };
    };
    const first = await read(await stream("first question"));
    expect(first.usage?.completion_tokens).toBe(6);
    expect(first.text).toBeGreaterThan(0);
    expect(first.usage?.prompt_tokens_details?.cached_tokens).toBeTypeOf("number");
    // The same system prompt again: the gateway sends it where that prefix is
    // cached. Three tries, as a loaded machine may push one past its
    // first-byte deadline and onto another pod.
    const cached: number[] = [];
    for (const q of ["second", "third", "fourth"]) cached.push((await read(await stream(`${q} question`))).usage?.prompt_tokens_details?.cached_tokens ?? 0);
    expect(Math.max(...cached)).toBeGreaterThan(system.length / 2);
  });

  it("routes the Responses API, streamed or not, and counts its input and output tokens as a whole answer", async () => {
    const counter = async (name: string) => {
      const text = await (await fetch(`${real.stack.envoy.adminUrl}/stats?filter=${name}`)).text();
      return [...text.matchAll(new RegExp(`${name}[^:]*: (\\d+)`, "g"))].reduce((n, m) => n + Number(m[1]), 0);
    };
    // An earlier stream's tokens are counted on its body's last (empty)
    // frame, which may come after its client has read [DONE]: start once
    // Envoy holds no client request.
    await waitFor("no request in flight through Envoy", async () => {
      const text = await (await fetch(`${real.stack.envoy.adminUrl}/stats?filter=downstream_rq_active`)).text();
      return [...text.matchAll(/^(http\.[^:]+): (\d+)$/gm)].every((m) => m[1].startsWith("http.admin.") || m[2] === "0");
    });
    // Counters reach Envoy on each worker's next tick after a request ends: wait until they stop moving.
    const settled = async () => {
      let last = "";
      let same = 0;
      await waitFor("the token counters settled", async () => {
        const now = `${await counter("tokens_in_total")},${await counter("tokens_out_total")}`;
        same = now === last ? same + 1 : 0;
        last = now;
        return same >= 5;
      });
    };
    await settled();
    const [inBefore, outBefore, failuresBefore] = [await counter("tokens_in_total"), await counter("tokens_out_total"), await counter("endpoint_failures_total")];
    const whole = await client.responses.create({ model: MODEL, instructions: "Answer briefly.", input: "What is a GPU?", max_output_tokens: 5 });
    expect(whole.status).toBe("completed");
    expect(whole.usage?.output_tokens).toBe(5);
    let completed: OpenAI.Responses.Response | undefined;
    const events = await client.responses.create({ model: MODEL, input: [{ role: "user", content: "Stream it" }], max_output_tokens: 4, stream: true });
    for await (const e of events) if (e.type === "response.completed") completed = e.response;
    expect(completed?.usage?.output_tokens).toBe(4);
    const inputs = (whole.usage?.input_tokens ?? 0) + (completed?.usage?.input_tokens ?? 0);
    let out = 0;
    await waitFor("both answers' tokens counted", async () => (out = (await counter("tokens_out_total")) - outBefore) >= 9).catch((e) => {
      throw new Error(`${e.message}: ${out} output tokens counted`);
    });
    expect(out).toBe(9);
    expect((await counter("tokens_in_total")) - inBefore).toBe(inputs);
    // A Responses stream ends with response.completed and no [DONE]: whole, not a pod's failure.
    expect(await counter("endpoint_failures_total")).toBe(failuresBefore);
  });

  it("answers an unknown model with the OpenAI 404, without reaching a pod", async () => {
    const before = [...(await upstreamRequests(real.stack)).values()].reduce((a, b) => a + b, 0);
    const err = await client.chat.completions.create({ model: "gpt-99", messages: [{ role: "user", content: "x" }] }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err.code).toBe("model_not_found");
    const after = [...(await upstreamRequests(real.stack)).values()].reduce((a, b) => a + b, 0);
    expect(after).toBe(before);
  });

  it("a frozen pod (SIGSTOP): every request still answered, the pod left out, and taken back once it thaws", async () => {
    const frozen = real.pods[1];
    frozen.signal("SIGSTOP");
    await waitFor("the aggregator to see the frozen pod go stale", () =>
      real.stack.aggregator.current().pools[0].endpoints.some((e) => e.address === frozen.address && !e.fresh), 10_000);
    expect(await statuses(12, "frozen")).toEqual(Array(12).fill(200));
    frozen.signal("SIGCONT");
    await waitFor("the thawed pod fresh again", () =>
      real.stack.aggregator.current().pools[0].endpoints.every((e) => e.fresh), 10_000);
    const served = (await upstreamRequests(real.stack)).get(frozen.address) ?? 0;
    await waitFor("the thawed pod to serve again", async () => {
      await statuses(6, "thawed");
      return ((await upstreamRequests(real.stack)).get(frozen.address) ?? 0) > served;
    }, 20_000);
  }, 60_000);

  it("a killed pod: no client error beyond the generation it was running; restarted, it is back by itself", async () => {
    const victim = real.pods[2];
    // Every slot of every pod busy with a long generation, so the victim is
    // surely serving when it dies.
    const inFlight = Array.from({ length: 6 }, () =>
      client.chat.completions
        .create({ model: MODEL, messages: [{ role: "user", content: `long ${Math.random()}` }], max_tokens: 6000, stream: true })
        .catch((e: unknown) => e),
    );
    await waitFor("the victim to run a generation", () =>
      real.stack.aggregator.current().pools[0].endpoints.some((e) => e.address === victim.address && e.running >= 1), 20_000);
    await victim.kill();
    for (const s of inFlight) {
      try {
        const stream = await s;
        if (stream instanceof Error) continue;
        for await (const _ of stream as AsyncIterable<unknown>) void _;
      } catch {
        // A stream on the killed pod breaks: that is the one allowed error.
      }
    }
    expect(await statuses(12, "after kill")).toEqual(Array(12).fill(200));
    await waitFor("the dead pod stale", () =>
      real.stack.aggregator.current().pools[0].endpoints.some((e) => e.address === victim.address && !e.fresh), 10_000);

    await victim.restart();
    await waitFor("the restarted pod fresh", () => real.stack.aggregator.current().pools[0].endpoints.every((e) => e.fresh), 10_000);
    const served = (await upstreamRequests(real.stack)).get(victim.address) ?? 0;
    await waitFor("the restarted pod to serve again", async () => {
      await statuses(6, "restarted");
      return ((await upstreamRequests(real.stack)).get(victim.address) ?? 0) > served;
    }, 20_000);
  }, 90_000);
});
