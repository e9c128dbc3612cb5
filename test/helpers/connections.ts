// Clients of a real Envoy with two workers: one keep-alive HTTP/1.1 connection
// each, on a known worker, with the official OpenAI client sending over it.
// Tests that must drive both workers open connections here and pin requests.
import http from "node:http";
import { Readable } from "node:stream";
import OpenAI from "openai";
import type { Stack } from "../../testing/launcher/stack.js";
import { waitFor } from "./stack.js";

export interface Conn {
  /** The Envoy worker that accepted this connection ("worker_0"). */
  worker: string;
  agent: http.Agent;
  /** The official OpenAI client, sending everything over this one connection. */
  client: OpenAI;
  /** GET on this connection. */
  get(path: string): Promise<{ status: number; json: any }>;
  /** Holds a request that has not been answered (the connection cannot carry another meanwhile). */
  busy: boolean;
  /** Completions the test sent on it. */
  sent: number;
}

/** A fetch for the OpenAI client that sends everything over one agent (maxSockets 1: one connection). */
function fetchOver(agent: http.Agent): typeof fetch {
  return ((input: string | URL | Request, init: RequestInit = {}) =>
    new Promise<Response>((resolve, reject) => {
      const url = new URL(input instanceof Request ? input.url : String(input));
      const headers: Record<string, string> = {};
      new Headers(init.headers).forEach((v, k) => (headers[k] = v));
      const req = http.request(url, { method: init.method ?? "GET", agent, headers }, (res) => {
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) h.set(k, Array.isArray(v) ? v.join(", ") : v);
        resolve(new Response(Readable.toWeb(res) as ReadableStream, { status: res.statusCode, headers: h }));
      });
      const signal = init.signal;
      if (signal) {
        if (signal.aborted) req.destroy(new Error("aborted"));
        signal.addEventListener("abort", () => req.destroy(new Error("aborted")), { once: true });
      }
      req.on("error", reject);
      req.end(init.body as string | undefined);
    })) as typeof fetch;
}

/** Connections accepted so far per worker ("worker_0": n), from Envoy's listener stats. */
export async function acceptedPerWorker(stack: Stack): Promise<Record<string, number>> {
  const stats = await stack.envoy.stats("^listener\\..*\\.worker_\\d+\\.downstream_cx_total$");
  const out: Record<string, number> = {};
  for (const [name, v] of Object.entries(stats)) out[/worker_\d+/.exec(name)![0]] = v;
  return out;
}

/**
 * `perWorker` connections on each of Envoy's two workers, interleaved
 * (worker A, worker B, worker A, ...). Connections are opened one at a time
 * (a GET /health each) and Envoy's per-worker accept counter says which
 * worker took it; surplus ones are closed. `apiKey` is the bearer token
 * every request sends unless it sets its own authorization header.
 */
export async function connect(stack: Stack, perWorker: number, apiKey = "x", opened: Conn[] = []): Promise<Conn[]> {
  const byWorker = new Map<string, Conn[]>();
  const spare: http.Agent[] = [];
  try {
    for (let attempt = 0; attempt < 20 * perWorker + 20; attempt++) {
      const workers = [...byWorker.values()];
      if (workers.length === 2 && workers.every((w) => w.length >= perWorker)) break;
      const before = await acceptedPerWorker(stack);
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      const doFetch = fetchOver(agent);
      const get = async (path: string) => {
        const r = await doFetch(`${stack.gatewayUrl}${path}`, { headers: { authorization: `Bearer ${apiKey}` } });
        return { status: r.status, json: await r.json() };
      };
      const health = await get("/health");
      if (health.status !== 200) throw new Error(`GET /health: ${health.status} ${JSON.stringify(health.json)}`);
      const after = await acceptedPerWorker(stack);
      const took = Object.keys(after).filter((w) => after[w] > (before[w] ?? 0));
      if (took.length !== 1 || (byWorker.get(took[0])?.length ?? 0) >= perWorker) {
        spare.push(agent);
        continue;
      }
      const client = new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey, maxRetries: 0, fetch: doFetch });
      const conn: Conn = { worker: took[0], agent, client, get, busy: false, sent: 0 };
      byWorker.set(took[0], [...(byWorker.get(took[0]) ?? []), conn]);
      opened.push(conn);
    }
  } finally {
    for (const a of spare) a.destroy();
  }
  const workers = [...byWorker.values()];
  if (workers.length !== 2 || workers.some((w) => w.length !== perWorker)) {
    throw new Error(`could not open ${perWorker} connections on each of two workers: ${JSON.stringify([...byWorker].map(([w, l]) => [w, l.length]))}`);
  }
  return Array.from({ length: perWorker }, (_, i) => workers.map((w) => w[i])).flat();
}

/**
 * Waits until `check` holds on each of Envoy's two workers, asked over a
 * connection of its own (opened here, closed after). Each worker installs a
 * snapshot, and ages the view, on its own refresh tick: what one request saw
 * says nothing of the next one, which may meet the other worker.
 */
export async function onEveryWorker(stack: Stack, what: string, check: (conn: Conn) => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const conns = await connect(stack, 1);
  try {
    await waitFor(`${what} on both workers`, async () => {
      for (const c of conns) if (!(await check(c))) return false;
      return true;
    }, timeoutMs);
  } finally {
    for (const c of conns) c.agent.destroy();
  }
}

/** Waits until both workers route on the aggregator's current snapshot (or a newer one). */
export async function waitForWorkers(stack: Stack): Promise<void> {
  const version = Number(stack.aggregator.current().version);
  await onEveryWorker(stack, `snapshot ${version} installed`, async (c) => (await c.get("/health")).json.snapshot_version >= version);
}

/**
 * Returns once the decisions `from`'s worker has made so far are known to
 * `to`'s: a worker shares its own on its next refresh tick and takes the
 * other's on its own next tick. /health shows a tick: its view_age_ms is the
 * worker's clock at its last tick less when it last heard the aggregator,
 * both read only on a tick.
 */
export async function shared(from: Conn, to: Conn): Promise<void> {
  for (const c of [from, to]) {
    const before = JSON.stringify((await c.get("/health")).json);
    await waitFor(`a refresh tick on ${c.worker}`, async () => JSON.stringify((await c.get("/health")).json) !== before);
  }
}
