/**
 * What sharing requests in flight and prefix placements between Envoy
 * replicas costs: bytes per second on each Envoy's stream (its reports up,
 * its fan-outs down) and the aggregator's CPU for the merges, with the real
 * code on both ends: each Envoy's link is the routing core's (native build:
 * linkReport, linkReceive, linkPrefixReport, linkPrefixApply), the
 * aggregator's merges are host/aggregator/peer-load.ts and peer-prefix.ts,
 * messages are encoded and decoded by the service's own codec.
 *
 * Synthetic load, in virtual time: `--envoys` Envoys in front of `--pods`
 * pods, `--rate` requests per second in all (split evenly), each request
 * streamed to a random pod, its first token after an exponential time
 * (mean 300 ms) and its end after another (mean 8 s), its prompt 200-4000
 * tokens. Every `--interval` ms each link reports and the aggregator runs
 * one round. With the prefix scorer weighed (unless `--no-prefix`) every
 * request is also routed by a worker of its Envoy (the routing core, on the
 * whole fleet's snapshot), so it writes its one record to that Envoy's prefix
 * log as in Envoy: a prompt of that many tokens (~4 bytes each), opening with
 * one of 100 shared system prompts (a quarter of it) and then text of its own.
 *
 *   node dist/testing/peer-share/fanout.js [--envoys 10] [--pods 1000] [--rate 1000] [--interval 100] [--seconds 60] [--no-prefix]
 */
import { parseArgs } from "node:util";
import { PeerLoadMerge } from "../../host/aggregator/peer-load.js";
import { PeerPrefixMerge } from "../../host/aggregator/peer-prefix.js";
import { snapshotServiceDefinition } from "../../host/proto.js";
import { NativeRouter } from "../native/router.js";
import { Rng } from "../fixtures/rng.js";
import { endpoint, pool, snapshot } from "../fixtures/snapshot-builders.js";
import { NativeSharedData } from "../native/shared-data.js";

const { values } = parseArgs({
  options: {
    envoys: { type: "string", default: "10" },
    pods: { type: "string", default: "1000" },
    rate: { type: "string", default: "1000" },
    interval: { type: "string", default: "100" },
    seconds: { type: "string", default: "60" },
    "no-prefix": { type: "boolean", default: false },
  },
});
const envoys = Number(values.envoys);
const pods = Number(values.pods);
const rate = Number(values.rate);
const intervalMs = Number(values.interval);
const seconds = Number(values.seconds);
const sharePrefixes = !values["no-prefix"];

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

/** Routed requests' prompts: a shared system prompt, then text of their own, `tokens` x 4 bytes in all (draws of their own: the load is the same with or without). */
const textRng = new Rng(11);
const TEXT = Array.from({ length: 64 * 1024 }, () => String.fromCharCode(97 + Math.floor(textRng.uniform(0, 26)))).join("");
function prompt(tokens: number): string {
  const bytes = tokens * 4;
  const system = Math.floor(bytes / 4);
  const from = Math.floor(textRng.uniform(0, 100)) * 64;
  const own = Math.floor(textRng.uniform(0, TEXT.length - bytes));
  return JSON.stringify({ model: "llama", messages: [{ role: "system", content: TEXT.slice(from, from + system) }, { role: "user", content: TEXT.slice(own, own + bytes - system) }] });
}

/** One worker per Envoy routing on the whole fleet with the prefix scorer alone weighed, and its shared data. */
async function prefixWorkers(): Promise<Array<{ router: NativeRouter; shared: NativeSharedData }>> {
  const fleet = snapshot([pool("p", "llama", Array.from({ length: pods }, (_, i) => endpoint(`10.${(i >> 8) & 255}.${i & 255}.1:8000`)),
    { queue: 0, kvCache: 0, running: 0, lora: 0, prefix: 1 })]);
  return Promise.all(Array.from({ length: envoys }, async (_, e) => {
    const router = await NativeRouter.load();
    router.reset(e + 1);
    const shared = new NativeSharedData();
    shared.install(router, fleet);
    return { router, shared };
  }));
}

function change(own: Map<bigint, Figures>, pod: number, n: number, s: number, t: number): void {
  const f = own.get(hashes[pod]) ?? [0, 0, 0];
  own.set(hashes[pod], [f[0] + n, f[1] + s, f[2] + t]);
}

async function main(): Promise<void> {
  const links = await Promise.all(Array.from({ length: envoys }, () => NativeRouter.load()));
  const own = Array.from({ length: envoys }, () => new Map<bigint, Figures>());
  // Events on each Envoy's table, by time: [atMs, envoy, pod, dn, ds, dt]; requests' arrivals (dn 1) route one prompt of dt tokens.
  const events: Array<[number, number, number, number, number, number]> = [];
  const workers = sharePrefixes ? await prefixWorkers() : [];
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
  const prefixMerge = new PeerPrefixMerge();
  let up = 0;
  let down = 0;
  // Prefix records' payloads with their field's tag and length (their messages' framing is counted with the in flight's).
  let prefixUp = 0;
  let prefixDown = 0;
  let prefixCpuUs = 0;
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
      if (sharePrefixes && dn === 1) workers[e].shared.route(workers[e].router, prompt(dt));
    }
    // Every worker's refresh tick swaps its records through its Envoy's log before its link reads it.
    for (const w of workers) w.shared.exchangePrefixLog(w.router);
    const measured = at > warmupMs;
    const hellos = links.map((l, e) => watch.requestSerialize({
      client: "envoy", sharesInflight: true, inflight: l.linkReport(encodeTable(own[e])),
      ...(sharePrefixes ? { prefixRecords: l.linkPrefixReport(workers[e].shared.prefixLog) } : {}),
    }));
    const cpu = process.cpuUsage();
    const taken = hellos.map((bytes) => watch.requestDeserialize(bytes));
    taken.forEach((hello, e) => merge.take(String(e), hello.inflight));
    const inflightRound = merge.round();
    const used = process.cpuUsage(cpu);
    const prefixCpu = process.cpuUsage();
    if (sharePrefixes) taken.forEach((hello, e) => prefixMerge.take(String(e), hello.prefixRecords));
    const prefixRound = prefixMerge.round();
    const fanOuts = [...inflightRound].map(([e, bytes]) => {
      const records = prefixRound.get(e) ?? new Uint8Array(0);
      return [Number(e), bytes.byteLength, records.byteLength, watch.responseSerialize({ peerInflight: bytes, ...(records.byteLength > 0 ? { peerPrefixRecords: records } : {}) })] as const;
    });
    const usedPrefix = process.cpuUsage(prefixCpu);
    for (const [e, payload, records, message] of fanOuts) {
      const fanOut = watch.responseDeserialize(message);
      if (payload > 0 && links[e].linkReceive(fanOut.peerInflight).byteLength === 0) throw new Error("a link rejected a fan-out");
      if (records > 0) {
        const log = links[e].linkPrefixApply(workers[e].shared.prefixLog, fanOut.peerPrefixRecords);
        if (log.byteLength === 0) throw new Error("a link rejected prefix records");
        workers[e].shared.prefixLog = log;
      }
    }
    if (!measured) continue;
    mergeCpuUs += used.user + used.system;
    prefixCpuUs += usedPrefix.user + usedPrefix.system;
    for (const hello of taken) if (hello.prefixRecords?.byteLength) prefixUp += hello.prefixRecords.byteLength + 3;
    for (const [, , records] of fanOuts) if (records > 0) prefixDown += records + 3;
    for (const bytes of hellos) {
      const payload = watch.requestDeserialize(bytes).inflight.byteLength;
      if (payload > 0) {
        up += payload + FRAMING_BYTES;
        messages++;
      }
    }
    for (const [, payload, records] of fanOuts) if (payload > 0 || records > 0) down += payload + FRAMING_BYTES;
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
    ...(sharePrefixes ? {
      prefixReportKBps: +perEnvoy(prefixUp).toFixed(2),
      prefixFanOutKBps: +perEnvoy(prefixDown).toFixed(2),
      prefixTotalKBpsPerEnvoy: +perEnvoy(prefixUp + prefixDown).toFixed(2),
      prefixRecordsDropped: prefixMerge.dropped,
      prefixAggregatorCpuPercentOfOneCore: +((prefixCpuUs / 1e6 / measuredS) * 100).toFixed(2),
    } : {}),
  }));
}

await main();
