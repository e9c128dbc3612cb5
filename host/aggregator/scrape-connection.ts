// One pod's /metrics over a kept-alive HTTP/1.1 connection: one GET at a
// time, the body as bytes. Deliberately not node:http: its client costs
// about 150-200 us of CPU per 50 KB scrape on the benchmark machine against
// about 60 us for this one (bench/scale), and at 1000 pods every 50 ms that
// difference is whole cores. It speaks only what a Prometheus endpoint
// needs: a GET, a 200 with a Content-Length, chunked or read-to-close body.
//
// Sockets read into one shared buffer (net's `onread`), and a response's
// body is copied into a buffer taken from a small free list and given back
// once the caller has read it: nothing is allocated per read or per scrape,
// which at 50 KB a page would otherwise keep the garbage collector busy (a
// quarter less CPU per scrape measured), and a few buffers serve a whole
// fleet, as responses mostly arrive one at a time.
import net from "node:net";
import tls from "node:tls";
import type { PodTlsConfig } from "../config/edge.js";
import { scrapeTlsOptions } from "./scrape-tls.js";

/** vLLM's /metrics with histograms is ~50-300 KB; anything far beyond is not a model server. */
export const MAX_BODY_BYTES = 8 * 1024 * 1024;
const MAX_HEAD_BYTES = 64 * 1024;

/** Why a scrape failed, in a few words fit for a metric label: "timeout", "refused", "reset", "http_503", "bad_response", "too_large", "network". */
export class ScrapeError extends Error {
  constructor(
    readonly kind: string,
    message: string,
  ) {
    super(message);
  }
}

/** Every socket's reads land here, one at a time, and are copied out before the next. */
const READ_BUFFER = Buffer.allocUnsafe(64 * 1024);

/** A response's body bytes, in a buffer grown to the largest page it has held. */
export class BodyStore {
  bytes = Buffer.allocUnsafe(0);
  length = 0;

  append(part: Buffer): void {
    const needed = this.length + part.length;
    if (needed > MAX_BODY_BYTES) throw tooLarge();
    if (needed > this.bytes.length) {
      const grown = Buffer.allocUnsafe(Math.min(MAX_BODY_BYTES, Math.max(needed, 2 * this.bytes.length, 64 * 1024)));
      this.bytes.copy(grown, 0, 0, this.length);
      this.bytes = grown;
    }
    part.copy(this.bytes, this.length);
    this.length = needed;
  }

  /** The bytes so far: a view, good until the store is given back. */
  view(): Buffer {
    return this.bytes.subarray(0, this.length);
  }
}

const freeStores: BodyStore[] = [];
const MAX_FREE_STORES = 32;
/** A store grown past this (a huge page) is let go rather than kept. */
const MAX_KEPT_STORE_BYTES = 1024 * 1024;

function takeStore(): BodyStore {
  const store = freeStores.pop() ?? new BodyStore();
  store.length = 0;
  return store;
}

function giveBack(store: BodyStore): void {
  if (freeStores.length < MAX_FREE_STORES && store.bytes.length <= MAX_KEPT_STORE_BYTES) freeStores.push(store);
}

export interface ScrapeAddress {
  /** IP literal to connect to (no brackets). */
  ip: string;
  port: number;
  /** Host header: the endpoint's own name (a DNS name's, or the address). */
  hostHeader: string;
}

interface Pending {
  /** Reads the body, synchronously, before its buffer goes back. */
  read: (body: Buffer) => unknown;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
  reader: ResponseReader;
  /** The request went out on a connection an earlier scrape used: the pod may have closed it meanwhile. */
  reused: boolean;
  retried: boolean;
}

export class ScrapeConnection {
  private socket: net.Socket | null = null;
  /** Whether the current socket has carried a complete response. */
  private used = false;
  private pending: Pending | null = null;
  private closed = false;
  /** The TLS settings changed: the kept-alive socket is replaced at the next scrape. */
  private redial = false;
  private readonly request: Buffer;

  constructor(
    private readonly address: ScrapeAddress,
    /** The pod serves HTTPS. */
    private tlsConfig?: PodTlsConfig,
  ) {
    this.request = Buffer.from(`GET /metrics HTTP/1.1\r\nHost: ${address.hostHeader}\r\nAccept: text/plain\r\nUser-Agent: llm-gateway-aggregator\r\n\r\n`, "latin1");
  }

  /**
   * GET /metrics within `timeoutMs` (connect + whole body), and `read` the
   * body as soon as it is complete (it must not keep the buffer): resolves
   * with what `read` returns, rejects with a ScrapeError or what `read`
   * threw. One at a time.
   */
  get<T>(timeoutMs: number, read: (body: Buffer) => T): Promise<T> {
    if (this.pending) return Promise.reject(new Error("a scrape is already in flight on this connection"));
    if (this.closed) return Promise.reject(new ScrapeError("network", "connection closed"));
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => this.fail(new ScrapeError("timeout", `timed out after ${timeoutMs} ms`)), timeoutMs);
      this.pending = { read, resolve: resolve as (value: unknown) => void, reject, timer, reader: new ResponseReader(), reused: false, retried: false };
      this.send();
    });
  }

  close(): void {
    this.closed = true;
    this.fail(new ScrapeError("network", "connection closed"));
    this.drop();
  }

  /** A reload changed how the pod is reached: the next scrape dials again with it. */
  setTls(tls: PodTlsConfig | undefined): void {
    if (JSON.stringify(tls) === JSON.stringify(this.tlsConfig)) return;
    this.tlsConfig = tls;
    this.redial = true;
  }

  private send(): void {
    const p = this.pending!;
    if (this.redial) {
      this.redial = false;
      this.drop();
    }
    if (this.socket === null) this.connect();
    p.reused = this.used;
    this.socket!.write(this.request);
  }

  private connect(): void {
    const socket = this.tlsConfig ? this.connectTls(this.tlsConfig) : net.connect({
      host: this.address.ip,
      port: this.address.port,
      onread: {
        buffer: READ_BUFFER,
        callback: (read: number, buffer: Uint8Array) => {
          this.onData(socket, buffer.subarray(0, read) as Buffer);
          return true; // keep reading
        },
      },
    });
    socket.setNoDelay(true);
    socket.on("error", (err: NodeJS.ErrnoException) => this.onError(socket, err));
    socket.on("close", () => this.onClose(socket));
    this.socket = socket;
    this.used = false;
  }

  /** TLS sockets do not take `onread`: their reads arrive as data events. */
  private connectTls(config: PodTlsConfig): net.Socket {
    const socket = tls.connect({ host: this.address.ip, port: this.address.port, ...scrapeTlsOptions(config) });
    socket.on("data", (chunk: Buffer) => this.onData(socket, chunk));
    return socket;
  }

  private onData(socket: net.Socket, chunk: Buffer): void {
    if (socket !== this.socket) return;
    const p = this.pending;
    if (!p) {
      // Nothing was asked: the connection is out of step; start afresh next time.
      this.drop();
      return;
    }
    let body: Buffer | null;
    try {
      body = p.reader.push(chunk);
    } catch (err) {
      this.fail(err as Error);
      this.drop();
      return;
    }
    if (body === null) return;
    if (p.reader.closesAfter || p.reader.leftover) this.drop();
    else this.used = true;
    this.complete(p, body);
  }

  private complete(p: Pending, body: Buffer): void {
    this.settle(p);
    let value: unknown;
    try {
      value = p.read(body);
    } catch (err) {
      p.reject(err as Error);
      return;
    } finally {
      p.reader.release();
    }
    p.resolve(value);
  }

  private onError(socket: net.Socket, err: NodeJS.ErrnoException): void {
    if (socket !== this.socket) return;
    this.socket = null;
    const p = this.pending;
    if (p && this.retryable(p, err.code === "ECONNRESET" || err.code === "EPIPE")) return;
    const kind = err.code === "ECONNREFUSED" ? "refused" : err.code === "ECONNRESET" || err.code === "EPIPE" ? "reset" : "network";
    this.fail(new ScrapeError(kind, err.message));
  }

  private onClose(socket: net.Socket): void {
    if (socket !== this.socket) return;
    this.socket = null;
    const p = this.pending;
    if (!p) return;
    const body = p.reader.end();
    if (body !== null) this.complete(p, body);
    else if (!this.retryable(p, true)) {
      this.fail(new ScrapeError("reset", "connection closed before the response was complete"));
    }
  }

  /**
   * A kept-alive connection the pod closed just as the request went out
   * (its idle timeout) is no failure of the pod: the request is sent once
   * more on a new connection, as browsers do for idempotent requests.
   */
  private retryable(p: Pending, lost: boolean): boolean {
    if (!lost || !p.reused || p.retried || p.reader.started || this.closed) return false;
    p.retried = true;
    this.send();
    return true;
  }

  private fail(err: Error): void {
    const p = this.pending;
    if (!p) return;
    this.settle(p);
    p.reader.release();
    this.drop(); // a response may still be on its way: it must not be read as the next one's
    p.reject(err);
  }

  private settle(p: Pending): void {
    clearTimeout(p.timer);
    this.pending = null;
  }

  private drop(): void {
    const socket = this.socket;
    this.socket = null;
    socket?.destroy();
  }
}

type BodyMode = { kind: "length"; remaining: number } | { kind: "chunked" } | { kind: "close" };

const CRLF = Buffer.from("\r\n");
const HEAD_END = Buffer.from("\r\n\r\n");

/**
 * An HTTP/1.1 response read incrementally from socket chunks: push() returns
 * the body once complete, a view of a pooled buffer that release() gives
 * back. Chunks may be reused once push() returns: what is kept is copied.
 */
export class ResponseReader {
  /** Some of the response has arrived. */
  started = false;
  /** The server said it closes the connection after this response. */
  closesAfter = false;
  /** Bytes arrived after the response's end. */
  leftover = false;
  private head: Buffer | null = null;
  private mode: BodyMode | null = null;
  // Chunked transfer coding: where in a chunk we are.
  private chunkState: "size" | "data" | "data-end" | "trailer" = "size";
  private chunkRemaining = 0;
  private line: Buffer | null = null;
  /** Taken at the first body byte. */
  private store: BodyStore | null = null;

  /** Gives the body's buffer back: the body returned must not be used after. */
  release(): void {
    if (this.store) giveBack(this.store);
    this.store = null;
  }

  push(chunk: Buffer): Buffer | null {
    this.started = true;
    if (this.mode === null) {
      const head = this.head === null ? chunk : Buffer.concat([this.head, chunk]);
      const end = head.indexOf(HEAD_END);
      if (end < 0) {
        if (head.length > MAX_HEAD_BYTES) throw new ScrapeError("bad_response", `response headers larger than ${MAX_HEAD_BYTES} bytes`);
        this.head = Buffer.from(head);
        return null;
      }
      this.mode = this.readHead(head.toString("latin1", 0, end));
      chunk = head.subarray(end + HEAD_END.length);
    }
    switch (this.mode.kind) {
      case "length": {
        const take = Math.min(chunk.length, this.mode.remaining);
        this.add(chunk.subarray(0, take));
        this.mode.remaining -= take;
        if (take < chunk.length) this.leftover = true;
        return this.mode.remaining === 0 ? this.body() : null;
      }
      case "chunked":
        return this.pushChunked(chunk);
      case "close":
        this.add(chunk);
        return null;
    }
  }

  /** At connection close: the body when it was to be read until close, else null (incomplete). */
  end(): Buffer | null {
    return this.mode?.kind === "close" ? this.body() : null;
  }

  private readHead(text: string): BodyMode {
    const lines = text.split("\r\n");
    const status = /^HTTP\/1\.([01]) (\d{3})/.exec(lines[0]);
    if (!status) throw new ScrapeError("bad_response", `not an HTTP/1.x response: ${JSON.stringify(lines[0].slice(0, 40))}`);
    const code = Number(status[2]);
    if (code !== 200) throw new ScrapeError(`http_${code}`, `HTTP ${code}`);
    let length: number | null = null;
    let chunked = false;
    let connection = status[1] === "0" ? "close" : "keep-alive";
    for (let i = 1; i < lines.length; i++) {
      const colon = lines[i].indexOf(":");
      if (colon <= 0) continue;
      const name = lines[i].slice(0, colon).trim().toLowerCase();
      const value = lines[i].slice(colon + 1).trim().toLowerCase();
      if (name === "content-length") length = /^\d+$/.test(value) ? Number(value) : NaN;
      else if (name === "transfer-encoding") chunked = value.split(",").some((c) => c.trim() === "chunked");
      else if (name === "connection") connection = value;
    }
    this.closesAfter = connection.split(",").some((c) => c.trim() === "close");
    if (chunked) return { kind: "chunked" };
    if (length !== null) {
      if (!Number.isSafeInteger(length)) throw new ScrapeError("bad_response", "malformed Content-Length");
      if (length > MAX_BODY_BYTES) throw tooLarge();
      return { kind: "length", remaining: length };
    }
    this.closesAfter = true;
    return { kind: "close" };
  }

  private pushChunked(chunk: Buffer): Buffer | null {
    let at = 0;
    while (at < chunk.length) {
      if (this.chunkState === "data") {
        const take = Math.min(chunk.length - at, this.chunkRemaining);
        this.add(chunk.subarray(at, at + take));
        at += take;
        this.chunkRemaining -= take;
        if (this.chunkRemaining === 0) this.chunkState = "data-end";
        continue;
      }
      // The other states read whole lines: a chunk's size, the CRLF after its data, trailers.
      const lineEnd = this.readLine(chunk, at);
      if (lineEnd < 0) return null;
      at = lineEnd;
      const line = this.line!.toString("latin1");
      this.line = null;
      if (this.chunkState === "size") {
        const size = Number.parseInt(line.split(";")[0].trim(), 16);
        if (!/^[0-9a-fA-F]+$/.test(line.split(";")[0].trim()) || !Number.isSafeInteger(size)) throw new ScrapeError("bad_response", "malformed chunk size");
        this.chunkRemaining = size;
        this.chunkState = size === 0 ? "trailer" : "data";
      } else if (this.chunkState === "data-end") {
        if (line !== "") throw new ScrapeError("bad_response", "chunk data longer than its size");
        this.chunkState = "size";
      } else if (line === "") {
        // The empty line after the trailers ends the response.
        if (at < chunk.length) this.leftover = true;
        return this.body();
      }
    }
    return null;
  }

  /** Appends to the current line up to its CRLF; returns the offset after it, or -1 when the line goes on in the next chunk. */
  private readLine(chunk: Buffer, at: number): number {
    const joined = this.line === null ? chunk.subarray(at) : Buffer.concat([this.line, chunk.subarray(at)]);
    const end = joined.indexOf(CRLF);
    if (end < 0) {
      if (joined.length > 4096) throw new ScrapeError("bad_response", "chunk header line too long");
      this.line = Buffer.from(joined); // the chunk's memory is reused after push()
      return -1;
    }
    const fromPrevious = this.line === null ? 0 : this.line.length;
    this.line = joined.subarray(0, end);
    return at + end + CRLF.length - fromPrevious;
  }

  private add(part: Buffer): void {
    (this.store ??= takeStore()).append(part);
  }

  private body(): Buffer {
    return this.store?.view() ?? Buffer.alloc(0);
  }
}

const tooLarge = () => new ScrapeError("too_large", `metrics body larger than ${MAX_BODY_BYTES} bytes`);
