// The slow-upload attack on a gateway: many connections each send most of
// a large request body and then stall, so Envoy holds every partial body,
// while a few normal clients keep asking for small completions. Envoy's
// resident set is sampled throughout. Loopback targets only; bounded in
// connections and time, and every socket is closed at the end.
import net from "node:net";
import { rssBytes } from "../soak/memory.js";

export interface SlowUploadOptions {
  /** The gateway's listener, host:port (plain HTTP). */
  target: string;
  /** Envoy's pid, for its resident set. */
  envoyPid: number;
  /** A model the gateway serves, for the normal clients. */
  model: string;
  /** Attacking connections; default 150. */
  connections?: number;
  /** The body length each announces; default 4,000,000. */
  bodyBytes?: number;
  /** What each sends of it before stalling; default 3,900,000. */
  sentBytes?: number;
  /** How long the stalled connections are held once all have sent; default 20 s. */
  holdMs?: number;
  /** Normal clients, each sending one small completion after another; default 2. */
  normalClients?: number;
  /** Progress lines; default none. */
  progress?: (line: string) => void;
}

export interface SlowUploadResult {
  baselineRssBytes: number;
  peakRssBytes: number;
  /** After the attackers closed and a short settle. */
  afterRssBytes: number;
  /** Normal clients' answers by status ("error" for a failed connection). */
  normal: Record<string, number>;
  /** What each attacking connection got: a status, "reset" (closed without an answer), or "held" (still silent). */
  attack: Record<string, number>;
  /** The bodies of the attackers' answers, by status (one each). */
  attackBodies: Record<string, string>;
  /** Seconds from the first attacker to the last one having sent its bytes. */
  sendSeconds: number;
}

const MiB = 1024 * 1024;
const mib = (b: number) => `${(b / MiB).toFixed(0)} MiB`;

function hostPort(target: string): { host: string; port: number } {
  const at = target.lastIndexOf(":");
  const host = target.slice(0, at).replace(/^\[|\]$/g, "");
  if (!/^127\.|^::1$|^localhost$/.test(host)) throw new Error(`refusing to attack ${target}: loopback targets only`);
  return { host, port: Number(target.slice(at + 1)) };
}

/** One attacker: headers, then `sent` bytes of a `total`-byte JSON body, then silence. */
class Attacker {
  readonly socket: net.Socket;
  outcome = "held";
  body = "";
  sent: Promise<void>;
  private head = "";

  constructor(addr: { host: string; port: number }, total: number, sent: number) {
    this.socket = net.connect(addr);
    this.socket.on("error", () => {});
    this.socket.on("data", (chunk) => {
      this.head += chunk.toString("latin1");
      const status = /^HTTP\/1\.1 (\d{3})/.exec(this.head)?.[1];
      if (status && this.outcome === "held") this.outcome = status;
      const at = this.head.indexOf("\r\n\r\n");
      if (at >= 0) this.body = this.head.slice(at + 4, at + 4 + 2000);
    });
    this.socket.on("close", () => {
      if (this.outcome === "held") this.outcome = "reset";
    });
    this.sent = new Promise<void>((resolve) => {
      this.socket.once("connect", () => {
        this.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: ${total}\r\n\r\n`);
        const prefix = `{"model":"attack","messages":[{"role":"user","content":"`;
        const chunk = Buffer.alloc(64 * 1024, "a");
        let left = sent - prefix.length;
        this.socket.write(prefix);
        const pump = (): void => {
          while (left > 0) {
            const piece = left >= chunk.length ? chunk : chunk.subarray(0, left);
            left -= piece.length;
            if (!this.socket.write(piece)) {
              this.socket.once("drain", pump);
              return;
            }
          }
          resolve();
        };
        pump();
      });
      this.socket.once("close", () => resolve());
    });
  }
}

/** Normal clients: small completions one after another until stopped. */
function normalTraffic(target: string, model: string, clients: number, statuses: Record<string, number>): () => Promise<void> {
  let running = true;
  const body = JSON.stringify({ model, messages: [{ role: "user", content: "hello" }], max_tokens: 2 });
  const loops = Array.from({ length: clients }, async () => {
    while (running) {
      let key: string;
      try {
        const r = await fetch(`http://${target}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body, signal: AbortSignal.timeout(10_000) });
        await r.arrayBuffer();
        key = String(r.status);
      } catch {
        key = "error";
      }
      statuses[key] = (statuses[key] ?? 0) + 1;
      await new Promise((r) => setTimeout(r, 100));
    }
  });
  return async () => {
    running = false;
    await Promise.all(loops);
  };
}

export async function slowUploadAttack(opts: SlowUploadOptions): Promise<SlowUploadResult> {
  const addr = hostPort(opts.target);
  const connections = opts.connections ?? 150;
  const total = opts.bodyBytes ?? 4_000_000;
  const sent = opts.sentBytes ?? 3_900_000;
  const holdMs = opts.holdMs ?? 20_000;
  const say = opts.progress ?? (() => {});
  const rss = () => rssBytes(opts.envoyPid) ?? 0;

  const baselineRssBytes = rss();
  let peakRssBytes = baselineRssBytes;
  const sampler = setInterval(() => (peakRssBytes = Math.max(peakRssBytes, rss())), 100);
  say(`Envoy RSS before: ${mib(baselineRssBytes)}; ${connections} connections each sending ${sent} of ${total} bytes, then stalling`);

  const normal: Record<string, number> = {};
  const stopNormal = normalTraffic(opts.target, opts.model, opts.normalClients ?? 2, normal);
  const attackers: Attacker[] = [];
  const started = performance.now();
  try {
    for (let i = 0; i < connections; i++) {
      attackers.push(new Attacker(addr, total, sent));
      // A few at a time, as a flood from many hosts arrives.
      if (i % 10 === 9) {
        await Promise.all(attackers.slice(-10).map((a) => a.sent));
        say(`  ${i + 1}/${connections} sent; Envoy RSS ${mib(rss())} (peak ${mib(peakRssBytes)})`);
      }
    }
    await Promise.all(attackers.map((a) => a.sent));
    const sendSeconds = (performance.now() - started) / 1000;
    const holdUntil = Date.now() + holdMs;
    while (Date.now() < holdUntil) {
      await new Promise((r) => setTimeout(r, Math.min(5_000, holdUntil - Date.now())));
      say(`  holding: Envoy RSS ${mib(rss())} (peak ${mib(peakRssBytes)}); normal clients ${JSON.stringify(normal)}`);
    }
    await stopNormal();
    const attack: Record<string, number> = {};
    const attackBodies: Record<string, string> = {};
    for (const a of attackers) {
      attack[a.outcome] = (attack[a.outcome] ?? 0) + 1;
      if (/^\d+$/.test(a.outcome)) attackBodies[a.outcome] ??= a.body;
    }
    for (const a of attackers) a.socket.destroy();
    await new Promise((r) => setTimeout(r, 2_000));
    const afterRssBytes = rss();
    say(`Envoy RSS peak ${mib(peakRssBytes)}, after closing ${mib(afterRssBytes)}; attackers ${JSON.stringify(attack)}; normal ${JSON.stringify(normal)}`);
    return { baselineRssBytes, peakRssBytes, afterRssBytes, normal, attack, attackBodies, sendSeconds };
  } finally {
    clearInterval(sampler);
    await stopNormal();
    for (const a of attackers) a.socket.destroy();
  }
}
