// A real Envoy reaching the aggregator over mutual TLS: its Wasm link
// (snapshots) and its ADS stream (clusters, routes, endpoints) both run on
// the TLS aggregator cluster with a client certificate from file-watched
// SDS, and requests are routed end to end; a client with a valid certificate
// that NACKs every push does not keep the real Envoy from taking a hot
// reload; a rotated client certificate is picked up by the running Envoy
// and shown on its next connection.
import { X509Certificate } from "node:crypto";
import { rmSync } from "node:fs";
import OpenAI from "openai";
import { afterAll, beforeAll, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { adsServiceDefinition } from "../../host/aggregator/xds-codec.js";
import { CLUSTER_TYPE as CDS } from "../../host/aggregator/xds.js";
import { startAggregator, type Aggregator } from "../../host/aggregator/index.js";
import { FakeEnvoy } from "../helpers/fake-envoy.js";
import { certDir, issueLeaf, makeCa, makeClientCert, makeServerCert, writeLeaf, type CertificateAuthority, type Leaf } from "../helpers/certs.js";
import { startTestStack, waitFor, type TestStack } from "../helpers/stack.js";

let dir: string;
let ca: CertificateAuthority;
let envoyCert: Leaf;
let stack: TestStack;
let replacement: Aggregator | null = null;

beforeAll(async () => {
  dir = certDir();
  ca = makeCa(dir, "control-plane");
  const server = makeServerCert(ca, dir, "aggregator", ["llm-gateway-aggregator", "127.0.0.1"]);
  envoyCert = makeClientCert(ca, dir, "envoy", "llm-gateway-envoy");
  stack = await startTestStack(
    [
      { name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }] },
      { name: "qwen", baseModel: "qwen3-32b", pods: [{ name: "qwen-a" }] },
    ],
    { controlPlaneTls: { caFile: ca.certFile, certFile: envoyCert.certFile, keyFile: envoyCert.keyFile, serverName: "llm-gateway-aggregator" } },
    {},
    { tls: { caFile: ca.certFile, certFile: server.certFile, keyFile: server.keyFile, refreshMs: 200 } },
  );
});

afterAll(async () => {
  await replacement?.close();
  await stack?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Serial numbers of the client certificates Envoy holds for the aggregator cluster (admin /certs). */
async function clientSerials(): Promise<string[]> {
  const certs = (await (await fetch(`${stack.envoy.adminUrl}/certs`)).json()) as {
    certificates?: Array<{ cert_chain?: Array<{ serial_number: string }> }>;
  };
  return (certs.certificates ?? []).flatMap((c) => (c.cert_chain ?? []).map((x) => x.serial_number.toLowerCase()));
}

const serialOf = (pem: string) => new X509Certificate(pem).serialNumber.toLowerCase();

it("routes requests with snapshots and ADS both over mutual TLS", async () => {
  const client = new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey: "x", maxRetries: 0 });
  const r = await client.chat.completions.create({ model: "llama-3.1-8b", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  expect(r.choices[0].message.content).toBeTruthy();
  const stats = await stack.envoy.stats("^cluster\\.llm_gateway_aggregator\\.ssl\\.handshake$|^cluster\\.llm_gateway_pool_llama\\.update_success$");
  expect(stats["cluster.llm_gateway_aggregator.ssl.handshake"]).toBeGreaterThanOrEqual(1);
  expect(stats["cluster.llm_gateway_pool_llama.update_success"]).toBeGreaterThanOrEqual(1);
  // The snapshot came over the TLS link: the filter knows the pod's pool.
  const models = (await (await fetch(`${stack.gatewayUrl}/v1/models`)).json()) as { data: Array<{ id: string }> };
  expect(models.data.map((m) => m.id).sort()).toEqual(["llama-3.1-8b", "qwen3-32b"]);
  expect(await clientSerials()).toContain(serialOf(envoyCert.cert));
});

it("takes a hot reload while another client with a valid certificate NACKs every push", async () => {
  const credentials = grpc.credentials.createSsl(Buffer.from(ca.cert), Buffer.from(envoyCert.key), Buffer.from(envoyCert.cert));
  const rogue = new FakeEnvoy(adsServiceDefinition(), `127.0.0.1:${stack.aggregator.grpcPort}`, credentials, { "grpc.ssl_target_name_override": "llm-gateway-aggregator" });
  try {
    rogue.send({ node: { id: "rogue" }, type_url: CDS, resource_names: [] });
    const first = await rogue.next();
    rogue.send({ type_url: CDS, version_info: "", response_nonce: first.nonce, error_detail: { message: "no" } });
    const routesBefore = (await stack.envoy.stats("^http\\.llm_gateway\\.rds\\.llm_gateway\\.update_success$"))["http.llm_gateway.rds.llm_gateway.update_success"];

    const reloading = stack.aggregator.reload({ ...stack.config, pools: stack.config.pools.filter((p) => p.name === "llama") });
    const pushed = await rogue.next();
    rogue.send({ type_url: CDS, version_info: "", response_nonce: pushed.nonce, error_detail: { message: "no" } });
    expect(await reloading).toMatchObject({ applied: true });

    await waitFor("the real Envoy to take the new route table", async () =>
      (await stack.envoy.stats("^http\\.llm_gateway\\.rds\\.llm_gateway\\.update_success$"))["http.llm_gateway.rds.llm_gateway.update_success"] > routesBefore);
    await waitFor("the real Envoy's filter to drop the model", async () => {
      const models = (await (await fetch(`${stack.gatewayUrl}/v1/models`)).json()) as { data: Array<{ id: string }> };
      return models.data.length === 1 && models.data[0].id === "llama-3.1-8b";
    });
  } finally {
    rogue.close();
  }
});

it("picks up a rotated client certificate without a restart", async () => {
  const pid = stack.envoy.pid;
  const rotated = writeLeaf(dir, "envoy", issueLeaf(ca, { commonName: "llm-gateway-envoy-rotated", usage: "client" }));
  await waitFor("Envoy to load the rotated client certificate", async () => (await clientSerials()).includes(serialOf(rotated.cert)));
  expect(await clientSerials()).not.toContain(serialOf(envoyCert.cert));
  expect(stack.envoy.pid).toBe(pid);
  // A new connection presents it: an aggregator started in place of the
  // old one (same port, same certificates) sees the rotated subject.
  const port = stack.aggregator.grpcPort;
  await stack.aggregator.close();
  const logs: string[] = [];
  replacement = await startAggregator(stack.config, { port, metricsPort: false, log: (l) => logs.push(l) });
  await waitFor("Envoy to reconnect with the rotated certificate", () => logs.some((l) => /stream \d+ opened from .*\(CN=llm-gateway-envoy-rotated\)/.test(l)), 15_000);
  expect(logs.some((l) => l.includes("CN=llm-gateway-envoy)"))).toBe(false);
  await waitFor("requests to be routed again", async () => (await fetch(`${stack.gatewayUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "llama-3.1-8b", messages: [{ role: "user", content: "hi" }], max_tokens: 1 }),
  })).status === 200);
});
