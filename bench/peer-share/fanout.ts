/**
 * What sharing requests in flight between Envoy replicas costs: bytes per
 * second on each Envoy's stream (its reports up, its fan-outs down) and the
 * aggregator's CPU for the merge, with the real code on both ends: each
 * Envoy's link is the routing core's (native build: linkReport,
 * linkReceive), the aggregator's merge is host/aggregator/peer-load.ts,
 * messages are encoded and decoded by the service's own codec.
 *
 * Synthetic load, in virtual time: `--envoys` Envoys in front of `--pods`
 * pods, `--rate` requests per second in all (split evenly), each request
 * streamed to a random pod, its first token after an exponential time
 * (mean 300 ms) and its end after another (mean 8 s), its prompt 200-4000
 * tokens. Every `--interval` ms each link reports and the aggregator runs
 * one round.
 *
 *   node dist/bench/peer-share/fanout.js [--envoys 10] [--pods 1000] [--rate 1000] [--interval 100] [--seconds 60]
 */
import { parseArgs } from "node:util";
import { PeerLoadMerge } from "../../host/aggregator/peer-load.js";
import { snapshotServiceDefinition } from "../../host/proto.js";
import { NativeRouter } from "../../testing/native/router.js";
import { Rng } from "../../testing/fixtures/rng.js";

const { values } = parseArgs({
  options: {
    envoys: { type: "string", default: "10" },
    pods: { type: "string", default: "1000" },
    rate: { type: "string", default: "1000" },
    interval: { type: "string", default: "100" },
    seconds: { type: "string", default: "60" },
  },
});
const envoys = Number(values.envoys);
const pods = Number(values.pods);
const rate = Number(values.rate);
const intervalMs = Number(values.interval);
const seconds = Number(values.seconds);

/** Per message on the wire beyond its payload: the protobuf field's tag and length, gRPC's 5-byte prefix, HTTP/2's 9-byte DATA frame header. */
const FRAMING_BYTES = 3 + 5 + 9;

type Figures = [number, number, number];
const watch = snapshotServiceDefinition.Watch;
const rng = new Rng(7);
const hashes = Array.from({ length: pods }, (_, i) => BigInt.asUintN(64, BigInt(i + 1) * 0x9e3779b97f4a7c15n));

/** An Envoy's own table in the routing core's encoding (assembly/core/fleet/inflight.ts). */
function encodeTable(own: Map<bigint, Figures>): Uint8Array {
  const entries = [...own].filter(([, f]) => f[0] > 0).sort((a, b) => (a[0] < b[0] ? -1 : 1));
  const bytes = new Uint8Array(4 + entries.length * 20);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, entries.length, true);
  entries.forEach(([h, [n, s, t]], i) => {
    view.setBigUint64(4 + i * 20, h, true);
    view.setInt32(12 + i * 20, n, true);
    view.setInt32(16 + i * 20, s, true);
    view.setInt32(20 + i * 20, s === 0 ? 0 : t, true);
  });
  return bytes;
}

function change(own: Map<bigint, Figures>, pod: number, n: number, s: number, t: number): void {
  const f = own.get(hashes[pod]) ?? [0, 0, 0];
  own.set(hashes[pod], [f[0] + n, f[1] + s, f[2] + t]);
}

async function main(): Promise<void> {
  const links = await Promise.all(Array.from({ length: envoys }, () => NativeRouter.load()));
  const own = Array.from({ length: envoys }, () => new Map<bigint, Figures>());
  // Events on each Envoy's table, by time: [atMs, envoy, pod, dn, ds, dt].
  const events: Array<[number, number, number, number, number, number]> = [];
  for (let t = 0; t < seconds * 1000; ) {
    t += rng.exponential(rate / 1000);
    const e = Math.floor(rng.uniform(0, envoys));
    const pod = Math.floor(rng.uniform(0, pods));
    const tokens = Math.floor(rng.uniform(200, 4000));
    const first = t + rng.exponential(1 / 300);
    events.push([t, e, pod, 1, 1, tokens], [first, e, pod, 0, -1, -tokens], [first + rng.exponential(1 / 8000), e, pod, -1, 0, 0]);
  }
  events.sort((a, b) => a[0] - b[0]);
  const merge = new PeerLoadMerge();
  let up = 0;
  let down = 0;
  let messages = 0;
  let mergeCpuUs = 0;
  let next = 0;
  const warmupMs = 20_000;
  const rounds = Math.floor((seconds * 1000) / intervalMs);
  for (let r = 1; r <= rounds; r++) {
    const at = r * intervalMs;
    for (; next < events.length && events[next][0] <= at; next++) {
      const [, e, pod, dn, ds, dt] = events[next];
      change(own[e], pod, dn, ds, dt);
    }
    const measured = at > warmupMs;
    const hellos = links.map((l, e) => watch.requestSerialize({ client: "envoy", sharesInflight: true, inflight: l.linkReport(encodeTable(own[e])) }));
    const cpu = process.cpuUsage();
    hellos.forEach((bytes, e) => merge.take(String(e), watch.requestDeserialize(bytes).inflight));
    const fanOuts = [...merge.round()].map(([e, bytes]) => [Number(e), bytes.byteLength, watch.responseSerialize({ peerInflight: bytes })] as const);
    const used = process.cpuUsage(cpu);
    for (const [e, payload, message] of fanOuts) {
      if (payload > 0 && links[e].linkReceive(watch.responseDeserialize(message).peerInflight).byteLength === 0) throw new Error("a link rejected a fan-out");
    }
    if (!measured) continue;
    mergeCpuUs += used.user + used.system;
    for (const bytes of hellos) {
      const payload = watch.requestDeserialize(bytes).inflight.byteLength;
      if (payload > 0) {
        up += payload + FRAMING_BYTES;
        messages++;
      }
    }
    for (const [, payload] of fanOuts) if (payload > 0) down += payload + FRAMING_BYTES;
  }
  const measuredS = (rounds * intervalMs - warmupMs) / 1000;
  const perEnvoy = (b: number) => b / envoys / measuredS / 1024;
  const inflight = own.reduce((s, m) => s + [...m.values()].reduce((x, f) => x + f[0], 0), 0);
  console.log(JSON.stringify({
    envoys, pods, rate, intervalMs, measuredS, inflightAtEnd: inflight,
    reportKBps: +perEnvoy(up).toFixed(2),
    fanOutKBps: +perEnvoy(down).toFixed(2),
    totalKBpsPerEnvoy: +perEnvoy(up + down).toFixed(2),
    reportsPerSPerEnvoy: +(messages / envoys / measuredS).toFixed(1),
    aggregatorCpuPercentOfOneCore: +((mergeCpuUs / 1e6 / measuredS) * 100).toFixed(2),
    mergeMsPerRound: +(mergeCpuUs / 1000 / (measuredS * 1000 / intervalMs)).toFixed(3),
  }));
}

await main();
