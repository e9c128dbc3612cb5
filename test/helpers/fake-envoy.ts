// One ADS stream as Envoy holds it, from a gRPC client, for tests of the
// aggregator's discovery server (host/aggregator/xds.ts) without an Envoy.
import * as grpc from "@grpc/grpc-js";
import { expect } from "vitest";
import { CLUSTER_LOAD_ASSIGNMENT_TYPE, type DiscoveryRequest } from "../../host/aggregator/xds.js";

/** A response as the client decodes it: every resource carries its "@type". */
export interface AdsResponse {
  version_info: string;
  type_url: string;
  nonce: string;
  resources: Array<Record<string, any>>;
}

export class FakeEnvoy {
  private readonly client: grpc.Client;
  private readonly call: grpc.ClientDuplexStream<DiscoveryRequest, AdsResponse>;
  private readonly queue: AdsResponse[] = [];
  private waiter: (() => void) | null = null;
  ended = false;

  /** Set when the stream ended with an error (e.g. refused by the server). */
  error: grpc.ServiceError | null = null;

  constructor(definition: grpc.ServiceDefinition, address: string, credentials = grpc.credentials.createInsecure(), options: grpc.ClientOptions = {}) {
    const Client = grpc.makeGenericClientConstructor(definition, "AggregatedDiscoveryService");
    this.client = new Client(address, credentials, options);
    this.call = (this.client as unknown as { StreamAggregatedResources(): FakeEnvoy["call"] }).StreamAggregatedResources();
    this.call.on("data", (r: AdsResponse) => {
      this.queue.push(r);
      this.waiter?.();
    });
    this.call.on("error", (err: grpc.ServiceError) => (this.error = err)); // also a cancelled stream at close
    this.call.on("end", () => (this.ended = true));
  }

  /** A request; endpoints (EDS) unless it names another type. */
  send(req: DiscoveryRequest): void {
    this.call.write({ type_url: CLUSTER_LOAD_ASSIGNMENT_TYPE, ...req });
  }

  /** Accepts a response: its nonce and version echoed, with the given subscription. */
  ack(r: AdsResponse, resourceNames: string[] = []): void {
    this.send({ type_url: r.type_url, resource_names: resourceNames, version_info: r.version_info, response_nonce: r.nonce });
  }

  /** The next response, failing after `ms` (a bound for a failing test, with room for a loaded machine). */
  async next(ms = 10_000): Promise<AdsResponse> {
    const deadline = Date.now() + ms;
    while (this.queue.length === 0) {
      if (Date.now() > deadline) throw new Error("no response");
      await new Promise<void>((r) => {
        this.waiter = r;
        setTimeout(r, 20);
      });
    }
    return this.queue.shift()!;
  }

  /** Fails if a response arrives within `ms`. */
  async nothingFor(ms = 300): Promise<void> {
    await new Promise((r) => setTimeout(r, ms));
    expect(this.queue).toEqual([]);
  }

  close(): void {
    this.call.cancel();
    this.client.close();
  }
}
