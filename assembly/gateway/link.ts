// The singleton WasmService's root: keeps one gRPC stream open to the
// aggregator (SnapshotService.Watch), republishes every pushed snapshot into
// shared data for the workers, and reconnects with exponential backoff. An
// empty message is the aggregator's heartbeat: it only moves the time the
// workers judge their view's age by. With replicas sharing in flight
// (peer-share.ts) and prefix placements (peer-prefix.ts), the link also
// reports on the stream and takes the aggregator's fan-outs.
import { RootContext } from "../abi/context";
import {
  BufferType, getBufferBytes, grpcCancel, grpcSend, grpcStream, HostBytes, log, LogLevel, nowMillis, setTickPeriod, utf8,
} from "../abi/hostcalls";
import { ProtoWriter } from "../core/wire/proto";
import { LinkConfig } from "./config";
import { FanOut, PeerShare } from "./peer-share";
import { publishHeartbeat, publishSnapshot } from "./shared-snapshot";

const SERVICE = utf8("llmgateway.v1.SnapshotService");
const METHOD = utf8("Watch");
const TICK_MS: u32 = 100;

export class LinkRoot extends RootContext {
  private config: LinkConfig = new LinkConfig();
  private upstream: ArrayBuffer = new ArrayBuffer(0);
  private token: u32 = 0;
  private backoffMs: u64 = 0;
  private nextAttemptMs: u64 = 0;
  private published: u64 = 0;
  /** When the aggregator was last heard from, as the cell has it (a closed stream's fan-out reset must not move it). */
  private heardMs: u64 = 0;
  private buffer: HostBytes = new HostBytes();
  private share: PeerShare = new PeerShare(0);

  onConfigure(size: i32): bool {
    if (getBufferBytes(BufferType.PluginConfig, 0, size, this.buffer)) {
      this.config = LinkConfig.parse(this.buffer.ptr, this.buffer.len);
      this.buffer.release();
    }
    if (this.config.error.length > 0) log(LogLevel.Error, "llm_gateway_link config: " + this.config.error);
    this.upstream = grpcServiceFor(this.config.aggregatorCluster);
    this.backoffMs = this.config.reconnectMinMs;
    this.share = new PeerShare(this.config.shareIntervalMs);
    // The tick also paces the in-flight reports: no slower than the share interval asks.
    setTickPeriod(this.share.enabled ? <u32>min<u64>(TICK_MS, this.config.shareIntervalMs) : TICK_MS);
    // Envoy may configure the singleton more than once; keep a single stream.
    if (this.token == 0) this.connect();
    return true;
  }

  onTick(): void {
    if (this.token == 0 && nowMillis() >= this.nextAttemptMs) this.connect();
    else if (this.token != 0 && this.share.enabled) this.share.tick(this.token, nowMillis());
  }

  onGrpcReceive(token: u32, size: i32): void {
    if (token != this.token) return;
    this.backoffMs = this.config.reconnectMinMs;
    if (size == 0) {
      if (this.published > 0) {
        this.heardMs = nowMillis();
        publishHeartbeat(this.published, this.heardMs);
      }
      return;
    }
    if (!getBufferBytes(BufferType.GrpcReceive, 0, size, this.buffer)) return;
    if (this.share.enabled) {
      // A fan-out also shows the aggregator alive, as a heartbeat does (once there is a view to age).
      const heard = this.published > 0 ? nowMillis() : this.heardMs;
      const fanOut = this.share.receive(this.buffer.ptr, this.buffer.len, this.published, heard);
      if (fanOut != FanOut.No) {
        this.buffer.release();
        if (fanOut == FanOut.Applied) {
          this.heardMs = heard;
        } else {
          log(LogLevel.Warn, "aggregator sent a fan-out that does not decode; reconnecting");
          this.drop();
        }
        return;
      }
    }
    this.published++;
    this.heardMs = nowMillis();
    publishSnapshot(this.buffer.ptr, this.buffer.len, this.published, this.heardMs);
    this.buffer.release();
  }

  onGrpcClose(token: u32, status: u32): void {
    if (token != this.token) return;
    this.token = 0;
    if (this.share.enabled) this.share.stop(this.published, this.heardMs);
    log(LogLevel.Warn, "aggregator stream closed (grpc status " + status.toString() + "); reconnecting in " + this.backoffMs.toString() + " ms");
    this.scheduleRetry();
  }

  onDone(): bool {
    if (this.token != 0) grpcCancel(this.token);
    this.token = 0;
    return true;
  }

  /** Ends the stream from this side; the next tick opens a new one after the backoff. */
  private drop(): void {
    grpcCancel(this.token);
    this.token = 0;
    this.share.stop(this.published, this.heardMs);
    this.scheduleRetry();
  }

  private connect(): void {
    const token = grpcStream(this.upstream, SERVICE, METHOD);
    if (token < 0) {
      log(LogLevel.Warn, "cannot open aggregator stream on cluster " + this.config.aggregatorCluster + " (status " + (-token).toString() + ")");
      this.scheduleRetry();
      return;
    }
    this.token = <u32>token;
    const hello = new ProtoWriter();
    hello.stringField(1, "envoy");
    if (this.share.enabled) this.share.start(hello);
    grpcSend(this.token, hello.finish(), false);
  }

  private scheduleRetry(): void {
    this.nextAttemptMs = nowMillis() + this.backoffMs;
    this.backoffMs = min(this.backoffMs * 2, this.config.reconnectMaxMs);
  }
}

/** A serialized envoy.config.core.v3.GrpcService { envoy_grpc { cluster_name } }. */
function grpcServiceFor(cluster: string): ArrayBuffer {
  const envoyGrpc = new ProtoWriter();
  envoyGrpc.stringField(1, cluster);
  const service = new ProtoWriter();
  service.bytesField(1, envoyGrpc.finish());
  return service.finish();
}
