// Scraping one pod: the kept-alive HTTP/1.1 client (scrape-connection.ts)
// against real servers (node:http and raw TCP ones that misbehave on
// purpose), the response reader fed every way a response can be cut, and the
// byte-level parser against the general one on real-looking pages.
import http from "node:http";
import net, { type AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { Engine } from "../../testing/engine/index.js";
import { MetricsRenderer } from "../../testing/fakeserver/metrics.js";
import { normalise, wantedMetrics } from "../../host/aggregator/normalise.js";
import { MAX_BODY_BYTES, ResponseReader, ScrapeConnection, ScrapeError } from "../../host/aggregator/scrape-connection.js";
import { parseMetrics, parsePrometheusText } from "../../host/aggregator/scrape.js";
import { VllmPage } from "../../testing/fakeserver/vllm-page.js";

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** A node:http server; counts the TCP connections it accepted. */
async function httpServer(handler: http.RequestListener): Promise<{ port: number; connections: () => number }> {
  const server = http.createServer(handler);
  let connections = 0;
  server.on("connection", () => connections++);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(() => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  return { port: (server.address() as AddressInfo).port, connections: () => connections };
}

/** A raw TCP server: `onRequest(socket, n)` for the n-th request (from 1) on each connection. */
async function rawServer(onRequest: (socket: net.Socket, n: number) => void): Promise<{ port: number; connections: () => number }> {
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    connections++;
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    let unread = "";
    let n = 0;
    socket.on("data", (d) => {
      unread += d.toString("latin1");
      for (let end = unread.indexOf("\r\n\r\n"); end >= 0; end = unread.indexOf("\r\n\r\n")) {
        unread = unread.slice(end + 4);
        onRequest(socket, ++n);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(() => new Promise<void>((resolve) => {
    for (const s of sockets) s.destroy();
    server.close(() => resolve());
  }));
  return { port: (server.address() as AddressInfo).port, connections: () => connections };
}

function connection(port: number): ScrapeConnection {
  const c = new ScrapeConnection({ ip: "127.0.0.1", port, hostHeader: `pod-a:${port}` });
  cleanups.push(() => c.close());
  return c;
}

async function scrapeError(p: Promise<unknown>): Promise<ScrapeError> {
  const err = await p.then(() => null, (e: unknown) => e);
  expect(err).toBeInstanceOf(ScrapeError);
  return err as ScrapeError;
}

const PAGE = "vllm:num_requests_waiting 3\nvllm:num_requests_running 1\n";
/** Reads a body as text (it may not be kept as bytes: its buffer is reused). */
const text = (body: Buffer) => body.toString();

describe("ScrapeConnection", () => {
  it("GETs /metrics with the pod's Host header, and keeps one connection for every scrape", async () => {
    const seen: Array<[string | undefined, string | undefined]> = [];
    const server = await httpServer((req, res) => {
      seen.push([req.url, req.headers.host]);
      res.end(PAGE);
    });
    const c = connection(server.port);
    for (let i = 0; i < 5; i++) expect(await c.get(1000, text)).toBe(PAGE);
    expect(seen).toEqual(Array(5).fill(["/metrics", `pod-a:${server.port}`]));
    expect(server.connections()).toBe(1);
  });

  it("reads a chunked body spread over many writes", async () => {
    const parts = ["# big page\n", "x".repeat(200_000), "\n", PAGE];
    const server = await httpServer((_req, res) => {
      for (const p of parts.slice(0, -1)) res.write(p);
      res.end(parts.at(-1));
    });
    const c = connection(server.port);
    expect(await c.get(1000, text)).toBe(parts.join(""));
    expect(await c.get(1000, text)).toBe(parts.join(""));
    expect(server.connections()).toBe(1);
  });

  it("reads a body that ends with the connection (HTTP/1.0, no length), and opens a new one next time", async () => {
    const server = await rawServer((socket) => socket.end(`HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n${PAGE}`));
    const c = connection(server.port);
    expect(await c.get(1000, text)).toBe(PAGE);
    expect(await c.get(1000, text)).toBe(PAGE);
    expect(server.connections()).toBe(2);
  });

  it("honours Connection: close", async () => {
    const server = await httpServer((_req, res) => res.setHeader("connection", "close").end(PAGE));
    const c = connection(server.port);
    await c.get(1000, text);
    await c.get(1000, text);
    expect(server.connections()).toBe(2);
  });

  it("sends the request again on a new connection when a kept-alive one was closed under it, once", async () => {
    // The second request on every connection is dropped unanswered, as by an idle timeout racing the request.
    const flaky = await rawServer((socket, n) => (n === 1 ? socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${PAGE.length}\r\n\r\n${PAGE}`) : socket.destroy()));
    const c = connection(flaky.port);
    for (let i = 0; i < 3; i++) expect(await c.get(1000, text)).toBe(PAGE);
    expect(flaky.connections()).toBe(3);

    // A fresh connection dropped is the pod's failure.
    const dead = await rawServer((socket) => socket.destroy());
    expect((await scrapeError(connection(dead.port).get(1000, text))).kind).toBe("reset");
  });

  it("also takes a kept-alive connection the pod closed while idle", async () => {
    // Closes every connection shortly after answering, like an idle timeout.
    const server = await rawServer((socket) => {
      socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${PAGE.length}\r\n\r\n${PAGE}`);
      setTimeout(() => socket.end(), 20);
    });
    const c = connection(server.port);
    await c.get(1000, text);
    await new Promise((r) => setTimeout(r, 100));
    expect(await c.get(1000, text)).toBe(PAGE);
    expect(server.connections()).toBe(2);
  });

  it("fails with a kind per cause: http_NNN, timeout, refused, too_large, bad_response; and recovers after", async () => {
    let status = 503;
    const server = await httpServer((_req, res) => res.writeHead(status).end(status === 200 ? PAGE : "busy"));
    const c = connection(server.port);
    const e503 = await scrapeError(c.get(1000, text));
    expect([e503.kind, e503.message]).toEqual(["http_503", "HTTP 503"]);
    status = 200;
    expect(await c.get(1000, text)).toBe(PAGE);

    const hang = await httpServer(() => {});
    const timeout = await scrapeError(connection(hang.port).get(50, text));
    expect([timeout.kind, timeout.message]).toEqual(["timeout", "timed out after 50 ms"]);

    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    expect((await scrapeError(connection(port).get(1000, text))).kind).toBe("refused");

    const huge = await rawServer((socket) => socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${MAX_BODY_BYTES + 1}\r\n\r\n`));
    expect((await scrapeError(connection(huge.port).get(1000, text))).kind).toBe("too_large");
    const hugeChunks = await httpServer((_req, res) => {
      const chunk = "x".repeat(1024 * 1024);
      for (let i = 0; i < 9; i++) res.write(chunk);
      res.end();
    });
    expect((await scrapeError(connection(hugeChunks.port).get(5000, text))).kind).toBe("too_large");

    const notHttp = await rawServer((socket) => socket.write("SSH-2.0-OpenSSH\r\n\r\n"));
    expect((await scrapeError(connection(notHttp.port).get(1000, text))).kind).toBe("bad_response");
  });

  it("rejects with what the reader throws, and keeps the connection: the page came, it was only unusable", async () => {
    const server = await httpServer((_req, res) => res.end(PAGE));
    const c = connection(server.port);
    await expect(c.get(1000, () => {
      throw new Error("no vllm:num_requests_running");
    })).rejects.toThrow("no vllm:num_requests_running");
    expect(await c.get(1000, text)).toBe(PAGE);
    expect(server.connections()).toBe(1);
  });

  it("drops a connection that sends more than the response, so the extra bytes are never read as the next one", async () => {
    const server = await rawServer((socket) => socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${PAGE.length}\r\n\r\n${PAGE}HTTP/1.1 200 OK\r\n`));
    const c = connection(server.port);
    expect(await c.get(1000, text)).toBe(PAGE);
    expect(await c.get(1000, text)).toBe(PAGE);
    expect(server.connections()).toBe(2);
  });
});

describe("ResponseReader", () => {
  const chunked =
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
    "5;ext=1\r\nhello\r\n" +
    "1A\r\n" + "abcdefghijklmnopqrstuvwxyz" + "\r\n" +
    "0\r\nX-Trailer: yes\r\n\r\n";
  const lengthed = `HTTP/1.1 200 OK\r\ncontent-length: 31\r\n\r\nhello${"abcdefghijklmnopqrstuvwxyz"}`;

  /**
   * Feeds `text` cut at the given offsets, each piece through the same
   * scratch memory, overwritten after each push as a socket's shared read
   * buffer is; returns the body once complete.
   */
  function feed(text: string, cuts: number[]): string | null {
    const bytes = Buffer.from(text, "latin1");
    const scratch = Buffer.alloc(bytes.length);
    const reader = new ResponseReader();
    let body: Buffer | null = null;
    let at = 0;
    for (const cut of [...cuts, bytes.length]) {
      expect(body).toBeNull(); // nothing after the end
      bytes.copy(scratch, 0, at, cut);
      body = reader.push(scratch.subarray(0, cut - at));
      scratch.fill("#");
      at = cut;
    }
    return body?.toString("latin1") ?? null;
  }

  it.each([
    ["chunked", chunked],
    ["Content-Length", lengthed],
  ])("reads a %s response cut anywhere, in two pieces or byte by byte", (_name, text) => {
    const expected = "hello" + "abcdefghijklmnopqrstuvwxyz";
    for (let cut = 1; cut < text.length; cut++) expect(feed(text, [cut])).toBe(expected);
    expect(feed(text, Array.from({ length: text.length - 1 }, (_, i) => i + 1))).toBe(expected);
  });

  it("rejects a malformed chunk size or a chunk longer than its size", () => {
    expect(() => feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", [])).toThrow(/chunk size/);
    expect(() => feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", [])).toThrow(/longer than its size/);
  });
});

describe("parseMetrics (the aggregator's parser)", () => {
  const general = (text: string, names: ReadonlySet<string>) => parsePrometheusText(text, (n) => names.has(n));

  it("finds exactly what the general parser finds, on vLLM, SGLang and TGI pages and the benchmark's 50 KB vLLM page", () => {
    const engine = new Engine({ model: "m", maxLoras: 1, maxNumSeqs: 4 }, 0);
    for (let i = 0; i < 6; i++) engine.submit({ id: `r${i}`, prompt: "x".repeat(300), maxTokens: 400, adapter: i === 0 ? "sql-lora" : undefined }, 0);
    engine.advanceTo(1000);
    const m = engine.metrics();
    const pages: Array<[string, "vllm" | "sglang" | "tgi"]> = [
      [new MetricsRenderer("vllm", true).render(m, 1.7e9), "vllm"],
      [new MetricsRenderer("vllm-legacy", false).render(m, 1.7e9), "vllm"],
      [new MetricsRenderer("sglang", false).render(m, 1.7e9), "sglang"],
      [new MetricsRenderer("tgi", false).render(m, 1.7e9), "tgi"],
      [Buffer.concat(new VllmPage(7).next(1.7e9, 42)).toString(), "vllm"],
    ];
    for (const [text, dialect] of pages) {
      const wanted = wantedMetrics(dialect);
      const fast = parseMetrics(Buffer.from(text), wanted);
      expect(fast.length).toBeGreaterThanOrEqual(3);
      expect(fast).toEqual(general(text, wanted));
    }
    const big = Buffer.concat(new VllmPage(7).next(1.7e9, 42));
    expect(big.length).toBeGreaterThan(40_000);
    expect(normalise("vllm", parseMetrics(big, wantedMetrics("vllm")))).toMatchObject({ waiting: 42, maxLora: 4, runningAdapters: ["chat-lora", "sql-lora"], kvTokens: 16 * 27000 });
  });

  it("takes a wanted name only whole: not as the prefix of a longer name, nor in a comment", () => {
    const names = new Set(["vllm:num_requests_waiting", "x_sum"]);
    const text = [
      "# HELP vllm:num_requests_waiting 7",
      'vllm:num_requests_waiting_by_reason{reason="x"} 9',
      "vllm:num_requests_waitin 8",
      "  vllm:num_requests_waiting\t4\r",
      'x_sum{a="é"} 1.5',
      "x_summary 3",
      "vllm:num_requests_waiting",
    ].join("\n");
    expect(parseMetrics(Buffer.from(text), names)).toEqual([
      { name: "vllm:num_requests_waiting", labels: {}, value: 4 },
      { name: "x_sum", labels: { a: "é" }, value: 1.5 },
    ]);
  });
});
