// The aggregator's gRPC port as a control plane only Envoy can reach, over
// real gRPC with certificates made here: mutual TLS on the snapshot stream
// and ADS (a stranger without a certificate, or with one from another CA,
// opens neither), the server certificate rotated without a restart, the
// stream cap, and a reload that a NACKing client cannot block.
import { X509Certificate } from "node:crypto";
import { rmSync } from "node:fs";
import tls from "node:tls";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAggregator, type Aggregator, type Snapshot } from "../../host/aggregator/index.js";
import { adsServiceDefinition } from "../../host/aggregator/xds-codec.js";
import { CLUSTER_TYPE as CDS, poolClusterName } from "../../host/aggregator/xds.js";
import { parseGatewayConfig, type GatewayConfig } from "../../host/config.js";
import { snapshotServiceDefinition } from "../../host/proto.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { certDir, issueLeaf, makeCa, makeClientCert, makeServerCert, writeLeaf, type CertificateAuthority, type Leaf } from "../helpers/certs.js";
import { FakeEnvoy } from "../helpers/fake-envoy.js";
import { waitFor } from "../helpers/stack.js";

const SnapshotService = grpc.makeGenericClientConstructor(snapshotServiceDefinition, "SnapshotService");
const ads = adsServiceDefinition();

interface Certs {
  dir: string;
  ca: CertificateAuthority;
  server: Leaf;
  envoy: Leaf;
  /** A client certificate from a CA the aggregator does not trust. */
  foreign: Leaf;
}

function makeCerts(): Certs {
  const dir = certDir();
  const ca = makeCa(dir, "control-plane");
  const other = makeCa(dir, "other");
  return {
    dir,
    ca,
    server: makeServerCert(ca, dir, "aggregator", ["llm-gateway-aggregator", "127.0.0.1"]),
    envoy: makeClientCert(ca, dir, "envoy", "llm-gateway-envoy"),
    foreign: makeClientCert(other, dir, "stranger"),
  };
}

const clientCredentials = (c: Certs, leaf: Leaf | null) =>
  grpc.credentials.createSsl(Buffer.from(c.ca.cert), leaf ? Buffer.from(leaf.key) : null, leaf ? Buffer.from(leaf.cert) : null);

/** Opens a Watch stream; resolves with its first snapshot, or rejects with the status it ended with. */
function firstSnapshot(port: number, credentials: grpc.ChannelCredentials): Promise<Snapshot> {
  const conn = new SnapshotService(`127.0.0.1:${port}`, credentials);
  const call = conn["Watch"]() as grpc.ClientDuplexStream<unknown, Snapshot>;
  call.write({ client: "test", haveVersion: 0 });
  return new Promise<Snapshot>((resolve, reject) => {
    call.on("data", (s: Snapshot) => {
      resolve(s);
      call.cancel();
    });
    call.on("error", reject);
  }).finally(() => conn.close());
}

/** The aggregator's certificate as a new TLS connection sees it. */
function servedCertificate(port: number, c: Certs): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: "127.0.0.1", port, ca: c.ca.cert, cert: c.envoy.cert, key: c.envoy.key, ALPNProtocols: ["h2"], servername: "llm-gateway-aggregator" }, () => {
      resolve(socket.getPeerX509Certificate()!.fingerprint256);
      socket.destroy();
    });
    socket.on("error", reject);
  });
}

const configText = (c: Certs, pod: string, extra = "") => `
gateway:
  controlPlaneTls: { caFile: ${c.ca.certFile}, certFile: ${c.envoy.certFile}, keyFile: ${c.envoy.keyFile} }
aggregator:
  port: 0
  metricsPort: 0
  tls: { caFile: ${c.ca.certFile}, certFile: ${c.server.certFile}, keyFile: ${c.server.keyFile}, refreshMs: 200 }
  maxStreams: 4
pools:
  - { name: llama, baseModel: llama, endpoints: ["${pod}"] }
${extra}`;

async function metric(agg: Aggregator, line: RegExp): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${agg.metricsPort}/metrics`)).text();
  const m = text.split("\n").find((l) => line.test(l));
  return m ? Number(m.split(" ").pop()) : NaN;
}

/** Snapshot and ADS streams open now. */
const openStreams = async (agg: Aggregator) =>
  (await metric(agg, /^llm_gateway_connected_streams /)) + (await metric(agg, /^llm_gateway_ads_streams /));

describe("control plane over mutual TLS", () => {
  let certs: Certs;
  let fleet: Fleet;
  let agg: Aggregator;
  let config: GatewayConfig;
  const logs: string[] = [];
  const envoys: FakeEnvoy[] = [];
  const connect = (leaf: Leaf | null) => {
    const e = new FakeEnvoy(ads, `127.0.0.1:${agg.grpcPort}`, clientCredentials(certs, leaf));
    envoys.push(e);
    return e;
  };

  beforeAll(async () => {
    certs = makeCerts();
    fleet = await startFleet([{ name: "a", model: "llama" }, { name: "b", model: "qwen" }]);
    config = parseGatewayConfig(configText(certs, fleet.pod("a").address));
    agg = await startAggregator(config, { port: 0, metricsPort: 0, log: (l) => logs.push(l), reloadDrainMs: 100 });
  });
  afterAll(async () => {
    for (const e of envoys) e.close();
    await agg?.close();
    await fleet?.close();
    rmSync(certs.dir, { recursive: true, force: true });
  });

  it("refuses a config that would serve the port in the clear off loopback, naming the field", () => {
    expect(() => parseGatewayConfig("aggregator: { host: 0.0.0.0 }\npools: [{ name: p, baseModel: m, endpoints: ['127.0.0.1:1'] }]")).toThrow(
      /aggregator\.tls: required when aggregator\.host \(0\.0\.0\.0\) is not a loopback address/,
    );
    expect(() => parseGatewayConfig("aggregator: { host: 0.0.0.0, plaintext: true }\npools: [{ name: p, baseModel: m, endpoints: ['127.0.0.1:1'] }]")).not.toThrow();
    expect(() => parseGatewayConfig(`aggregator: { tls: { caFile: a, certFile: b, keyFile: c } }\npools: [{ name: p, baseModel: m, endpoints: ['127.0.0.1:1'] }]`)).toThrow(
      /gateway\.controlPlaneTls: required when aggregator\.tls is set/,
    );
  });

  it("serves the snapshot stream and ADS to a client with a certificate from its CA", async () => {
    const snapshot = await firstSnapshot(agg.grpcPort, clientCredentials(certs, certs.envoy));
    expect(snapshot.pools.map((p) => p.name)).toEqual(["llama"]);
    const envoy = connect(certs.envoy);
    envoy.send({ node: { id: "envoy-good" }, type_url: CDS, resource_names: [] });
    const clusters = await envoy.next();
    expect(clusters.resources.map((r) => r.name)).toEqual([poolClusterName("llama")]);
    envoy.close();
  });

  it("refuses a stranger without a client certificate, and one whose certificate is from another CA, on both services", async () => {
    for (const leaf of [null, certs.foreign]) {
      await expect(firstSnapshot(agg.grpcPort, clientCredentials(certs, leaf))).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
      const stranger = connect(leaf);
      stranger.send({ type_url: CDS, resource_names: [] });
      await waitFor("the ADS stream to fail", () => stranger.error !== null);
      expect(stranger.error!.code).toBe(grpc.status.UNAVAILABLE);
      await expect(stranger.next(300)).rejects.toThrow("no response");
    }
    // And plaintext gRPC gets nothing either.
    await expect(firstSnapshot(agg.grpcPort, grpc.credentials.createInsecure())).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
  });

  it("serves a rotated certificate to new connections without a restart", async () => {
    const before = await servedCertificate(agg.grpcPort, certs);
    expect(before).toBe(new X509Certificate(certs.server.cert).fingerprint256);
    const rotated = writeLeaf(certs.dir, "aggregator", issueLeaf(certs.ca, { commonName: "rotated", dnsNames: ["llm-gateway-aggregator"], ips: ["127.0.0.1"] }));
    const expected = new X509Certificate(rotated.cert).fingerprint256;
    await waitFor("the rotated certificate to be served", async () => (await servedCertificate(agg.grpcPort, certs)) === expected);
    // gRPC clients go on connecting with it.
    expect((await firstSnapshot(agg.grpcPort, clientCredentials(certs, certs.envoy))).version).toBeGreaterThan(0);
  });

  it("refuses the stream past aggregator.maxStreams with RESOURCE_EXHAUSTED, counted, and admits one when a place frees", async () => {
    await waitFor("earlier streams to be gone", async () => (await openStreams(agg)) === 0);
    const held = [0, 1, 2, 3].map(() => connect(certs.envoy));
    for (const e of held) e.send({ type_url: CDS, resource_names: [] });
    for (const e of held) await e.next();
    const before = await metric(agg, /^llm_gateway_control_plane_streams_refused_total\{method="StreamAggregatedResources"\}/);
    const extra = connect(certs.envoy);
    extra.send({ type_url: CDS, resource_names: [] });
    await waitFor("the fifth stream to be refused", () => extra.error !== null);
    expect(extra.error!.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(extra.error!.details).toMatch(/aggregator\.maxStreams 4/);
    await expect(firstSnapshot(agg.grpcPort, clientCredentials(certs, certs.envoy))).rejects.toMatchObject({ code: grpc.status.RESOURCE_EXHAUSTED });
    expect(await metric(agg, /^llm_gateway_control_plane_streams_refused_total\{method="StreamAggregatedResources"\}/)).toBe(before + 1);
    expect(await metric(agg, /^llm_gateway_control_plane_streams_refused_total\{method="Watch"\}/)).toBeGreaterThanOrEqual(1);

    held[0].close();
    await waitFor("a place to free", async () => {
      const probe = connect(certs.envoy);
      probe.send({ type_url: CDS, resource_names: [] });
      const got = await probe.next(2_000).then(() => true, () => false);
      probe.close();
      return got;
    });
    for (const e of held) e.close();
  });

  it("applies a reload that one Envoy NACKs: the others take it, the refusing one is logged by node id and counted", async () => {
    await waitFor("the previous streams to close", async () => (await openStreams(agg)) === 0);
    const good = connect(certs.envoy);
    const rogue = connect(certs.envoy);
    good.send({ node: { id: "envoy-good" }, type_url: CDS, resource_names: [] });
    rogue.send({ node: { id: "envoy-rogue" }, type_url: CDS, resource_names: [] });
    good.ack(await good.next());
    const first = await rogue.next();
    rogue.ack(first);
    const rejectedBefore = await metric(agg, /^llm_gateway_xds_rejections_total\{type="clusters"\}/);

    const next = parseGatewayConfig(configText(certs, fleet.pod("a").address, `  - { name: qwen, baseModel: qwen, endpoints: ["${fleet.pod("b").address}"] }`));
    const reloading = agg.reload(next);
    // The rogue refuses every push it gets; the good one accepts and asks for the new cluster's endpoints.
    const pushed = await rogue.next();
    rogue.send({ type_url: CDS, version_info: first.version_info, response_nonce: pushed.nonce, error_detail: { message: "never" } });
    const added = await good.next();
    expect(added.resources.map((r) => r.name)).toEqual([poolClusterName("llama"), poolClusterName("qwen")]);
    good.ack(added);
    good.send({ resource_names: [poolClusterName("llama"), poolClusterName("qwen")] });
    good.ack(await good.next(), [poolClusterName("llama"), poolClusterName("qwen")]);

    const result = await reloading;
    expect(result).toMatchObject({ applied: true });
    expect(agg.config().pools.map((p) => p.name)).toEqual(["llama", "qwen"]);
    await waitFor("the snapshot to carry the new pool", () => agg.current().pools.some((p) => p.name === "qwen"));
    expect(logs.some((l) => /envoy-rogue@.* rejected clusters version \d+ and keeps its previous ones: never/.test(l))).toBe(true);
    expect(logs.some((l) => /config reload goes ahead; Envoys that refused it keep their last good resources: .*envoy-rogue/.test(l))).toBe(true);
    expect(await metric(agg, /^llm_gateway_xds_rejections_total\{type="clusters"\}/)).toBe(rejectedBefore + 1);
  });
});
