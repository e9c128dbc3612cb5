// The filter side of a parity run: every event goes to the emulated Envoy
// (the link's gRPC stream, the clock, the workers' timers, HTTP streams), and
// a decision is read off what Envoy would see: the request headers the
// filter set, or its local reply.
import type { HttpStream } from "../../testing/proxy-wasm-emulator/index.js";
import type { EmulatedGateway } from "../helpers/emulated-gateway.js";
import type { Decision, ParityEvent, Side } from "./events.js";

export class FilterSide implements Side {
  private readonly streams = new Map<string, HttpStream>();
  /** Streams the filter paused in a hold queue and has not yet let go or answered. */
  private readonly held = new Map<string, HttpStream>();

  constructor(private readonly gateway: EmulatedGateway) {}

  released(): Map<string, Decision> {
    const out = new Map<string, Decision>();
    for (const [id, stream] of this.held) {
      const d = decisionOf(stream);
      if ("held" in d) continue;
      out.set(id, d);
      this.held.delete(id);
    }
    return out;
  }

  apply(event: ParityEvent): Decision | undefined {
    const gw = this.gateway;
    switch (event.type) {
      case "snapshot":
        gw.publish(event.snapshot);
        return undefined;
      case "heartbeat":
        gw.heartbeat();
        return undefined;
      case "advance":
        gw.host.advance(event.ms);
        return undefined;
      case "tick":
        gw.host.tick();
        return undefined;
      case "request": {
        const body = typeof event.body === "string" ? Buffer.from(event.body) : event.body;
        const headers: [string, string][] = [[":method", "POST"], [":path", event.path], ["content-type", "application/json"]];
        // A body that ends with trailers comes chunked, without a length.
        if (!event.trailers) headers.push(["content-length", String(body.length)]);
        if (event.priority !== undefined) headers.push(["x-llm-priority", event.priority]);
        const stream = gw.request({ headers, body, chunks: event.chunks, trailers: event.trailers ? { "x-trailer": "1" } : undefined }, event.worker ?? 0);
        this.streams.set(event.id, stream);
        const decision = decisionOf(stream);
        if ("held" in decision) this.held.set(event.id, stream);
        return decision;
      }
      case "done": {
        const stream = this.streams.get(event.id);
        if (!stream) throw new Error(`no open stream ${event.id}`);
        this.streams.delete(event.id);
        // A held stream's client leaving: only the stream's end (its place in the queue goes).
        if (this.held.delete(event.id)) {
          stream.finish({});
          return undefined;
        }
        // Envoy knows the upstream of every request a pod answered: the chosen one unless another answered.
        const chosen = stream.requestHeaders.get("x-gateway-destination-endpoint")?.split(",")[0];
        const upstream = event.upstream ?? (event.status !== undefined ? chosen : undefined);
        // A pod's answer: a stream ends with its terminal event unless it broke.
        if (event.status !== undefined && !stream.answered) stream.respond([event.broken ? "data: {}\n\n" : "data: {}\n\ndata: [DONE]\n\n"]);
        stream.finish({ responseCode: event.status, upstreamAddress: upstream });
        return undefined;
      }
    }
  }
}

function decisionOf(stream: HttpStream): Decision {
  const reply = stream.localResponse;
  if (reply) {
    const retryAfter = reply.headers.find(([k]) => k === "retry-after")?.[1];
    return { routed: false, status: reply.status, body: JSON.parse(reply.body), ...(reply.status === 429 ? { retryAfter } : {}) };
  }
  // Neither answered nor let go: paused in a hold queue.
  if (!stream.released) return { held: true };
  const pool = stream.requestHeaders.get("x-gateway-pool");
  if (pool === undefined) throw new Error(`stream ${stream.id}: the filter neither routed nor answered the request`);
  const destination = stream.requestHeaders.get("x-gateway-destination-endpoint");
  return { routed: true, pool, destination: destination === undefined ? null : destination.split(","), served: servedModel(stream.forwardedBody) };
}

/** The "model" the pod reads in the body the filter let through (last duplicate wins, as in Python and JSON.parse). */
function servedModel(body: Uint8Array): string {
  const text = Buffer.from(body).toString("utf8").replace(/^\uFEFF/, "");
  return (JSON.parse(text) as { model: string }).model;
}
