// The snapshot protocol (proto/gateway.proto) for Node: the gRPC service
// definition, plus the exact codec grpc-js uses on the wire, so tools and
// tests can hand the native router the same bytes Envoy receives.
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import type { AdmissionConfig } from "./config.js";
import { CONTRACT } from "./contract.js";
import { protoPath } from "./paths.js";

/** Scorer weights by scorer name (proto map<string, float>). */
export type WeightsMsg = Record<string, number>;
export interface EndpointMsg {
  address: string;
  waiting: number;
  running: number;
  kvCacheUsage: number;
  fresh: boolean;
  maxLora: number;
  runningAdapters: string[];
  waitingAdapters: string[];
  /**
   * Relative service rate within the pool; 0 = unknown. Optional here only so
   * hand-built messages may leave it out (it then encodes as 0); decoded
   * messages always carry it.
   */
  capacity?: number;
  /** KV-cache capacity in tokens; 0 (or absent) = unknown. */
  kvTokens?: number;
  /** Sequences the engine batches at once; 0 (or absent) = unknown. */
  batchSlots?: number;
}
export interface PoolMsg { name: string; baseModel: string; weights: WeightsMsg; endpoints: EndpointMsg[] }
/** proto Priority: the encoder takes the number (or the name); decoded messages carry the number. */
export const PRIORITY_WIRE = CONTRACT.priorities;
export interface SplitMsg { model: number; weight: number }
/**
 * profile, priority and splits are optional here only so hand-built messages
 * may leave them out (profile 0, Standard, no split); decoded messages always
 * carry them.
 */
export interface ModelMsg { name: string; pool: number; adapter: string; profile?: number; priority?: number; splits?: SplitMsg[] }
/** The config's admission settings travel as they are (proto Admission). */
export type AdmissionMsg = AdmissionConfig;
/** proto Deadlines: per-try deadline to a response's first byte, computed per request by the filter. */
export interface DeadlinesMsg { firstByteMs: number; promptMsPerKtoken: number; outputMsPerToken: number; assumedOutputTokens: number }
/** deadlines is optional here only so hand-built messages may leave it out (the filter then sets no per-try deadline). */
export interface ProfileMsg { name: string; weights: WeightsMsg; admission: AdmissionMsg; deadlines?: DeadlinesMsg }
/** Without profiles (hand-built messages may leave them out) the filter scores with pool weights and admits everything. */
export interface SnapshotMsg { version: number; models: ModelMsg[]; pools: PoolMsg[]; generatedUnixMs: number; profiles?: ProfileMsg[]; peerInflight?: Uint8Array; replicaIndex?: number; replicaCount?: number; peerPrefixRecords?: Uint8Array; peerQueues?: Uint8Array; peerEjections?: Uint8Array }
/** inflight, sharesInflight, prefixRecords, queues and ejections: an Envoy sharing its in flight, prefix placements, queue board and health verdicts with its replicas (host/aggregator/peer-load.ts, peer-prefix.ts, peer-queues.ts, peer-health.ts). */
export interface HelloMsg { client: string; haveVersion: number; inflight?: Uint8Array; sharesInflight?: boolean; prefixRecords?: Uint8Array; queues?: Uint8Array; ejections?: Uint8Array }

/**
 * Exactly a message interface's keys (tsc refuses a missing or an extra one),
 * as a list test/unit/proto-contract.test.ts compares with the .proto's fields: the
 * interfaces are hand-written, and this keeps them to the .proto.
 */
function fieldsOf<T>(fields: { [K in keyof T]-?: true }): string[] {
  return Object.keys(fields);
}

/** Each message's field names, protobufjs' camelCase (what the interfaces above and the codec use). */
export const MESSAGE_FIELDS: Readonly<Record<string, readonly string[]>> = {
  Hello: fieldsOf<HelloMsg>({ client: true, haveVersion: true, inflight: true, sharesInflight: true, prefixRecords: true, queues: true, ejections: true }),
  Snapshot: fieldsOf<SnapshotMsg>({
    version: true, models: true, pools: true, generatedUnixMs: true, profiles: true, peerInflight: true, replicaIndex: true, replicaCount: true, peerPrefixRecords: true, peerQueues: true,
    peerEjections: true,
  }),
  Model: fieldsOf<ModelMsg>({ name: true, pool: true, adapter: true, profile: true, priority: true, splits: true }),
  Split: fieldsOf<SplitMsg>({ model: true, weight: true }),
  Profile: fieldsOf<ProfileMsg>({ name: true, weights: true, admission: true, deadlines: true }),
  Deadlines: fieldsOf<DeadlinesMsg>({ firstByteMs: true, promptMsPerKtoken: true, outputMsPerToken: true, assumedOutputTokens: true }),
  Admission: fieldsOf<AdmissionMsg>({
    enabled: true, maxWaiting: true, maxKvCache: true, sheddableFactor: true, criticalFactor: true, maxRetryAfterS: true,
    waitCriticalMs: true, waitStandardMs: true, waitSheddableMs: true,
  }),
  Pool: fieldsOf<PoolMsg>({ name: true, baseModel: true, weights: true, endpoints: true }),
  Endpoint: fieldsOf<EndpointMsg>({
    address: true, waiting: true, running: true, kvCacheUsage: true, fresh: true, maxLora: true,
    runningAdapters: true, waitingAdapters: true, capacity: true, kvTokens: true, batchSlots: true,
  }),
};

export const packageDefinition = protoLoader.loadSync(protoPath, {
  longs: Number,
  defaults: true,
  arrays: true,
});

export const snapshotServiceDefinition = packageDefinition["llmgateway.v1.SnapshotService"] as grpc.ServiceDefinition;

const watch = snapshotServiceDefinition.Watch;

export function encodeSnapshot(snapshot: SnapshotMsg): Buffer {
  return watch.responseSerialize(snapshot);
}

export function decodeSnapshot(bytes: Buffer): SnapshotMsg {
  return watch.responseDeserialize(bytes) as SnapshotMsg;
}
