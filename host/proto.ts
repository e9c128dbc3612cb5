// The snapshot protocol (proto/gateway.proto) for Node: the gRPC service
// definition, plus the exact codec grpc-js uses on the wire, so tools and
// tests can hand the native router the same bytes Envoy receives.
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import type { AdmissionConfig } from "./config.js";
import { protoPath } from "./paths.js";

export interface WeightsMsg { queue: number; kvCache: number; running: number; lora: number; prefix: number }
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
export const PRIORITY_WIRE = { standard: 0, critical: 1, sheddable: 2 } as const;
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
export interface SnapshotMsg { version: number; models: ModelMsg[]; pools: PoolMsg[]; generatedUnixMs: number; profiles?: ProfileMsg[] }
export interface HelloMsg { client: string; haveVersion: number }

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
