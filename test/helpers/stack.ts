// Starts a real stack for end-to-end tests: fake pods on free loopback ports,
// the aggregator, and Envoy loading build/filter.wasm; every port is 0.
import http from "node:http";
import net from "node:net";
import { startFleetStack, type FleetPool, type FleetStack } from "../../testing/launcher/stack.js";

export type TestPool = FleetPool;
export type TestStack = FleetStack;
/** The stack every end-to-end test runs: see startFleetStack. */
export const startTestStack = startFleetStack;

/** Polls `check` until it returns true, failing after `timeoutMs`. */
export async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

/**
 * A free port below Linux's ephemeral range (32768+), for a server that must
 * come back on the same port: a port-0 bind elsewhere cannot take it meanwhile.
 */
export async function stablePort(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 10_000);
    const free = await new Promise<boolean>((resolve) => {
      const probe = net.createServer();
      probe.once("error", () => resolve(false));
      probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error("no free port in 20000-29999");
}

/** A plain HTTP server outside every pool, counting what reaches it. */
export async function startDecoy(): Promise<{ address: string; hits: () => number; close: () => Promise<void> }> {
  let hits = 0;
  const server = http.createServer((_req, res) => {
    hits++;
    res.end('{"decoy":true}');
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    address: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    hits: () => hits,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

