// The link's part in sharing prefix placements between Envoy replicas
// (core/prefix/prefix-share.ts has the format): on its share tick it reads
// the workers' prefix log and reports the records appended since its last
// report, the peers' excepted; a fan-out's records from the other replicas
// are appended to the log under the link's own writer id, so every worker
// replays them on its next tick. On the link's tick and stream messages
// only: nothing on a request's path.
import { getSharedData, HostBytes } from "../abi/hostcalls";
import { LINK_WRITER, PrefixRecordBatch, PrefixShareReporter } from "../core/prefix/prefix-share";
import { ProtoWriter } from "../core/wire/proto";
import { PREFIX_LOG_KEY, SharedPrefixLog } from "./shared-prefix-log";

const HELLO_PREFIX_RECORDS: u32 = 5;

export class PeerPrefixShare {
  private reporter: PrefixShareReporter = new PrefixShareReporter();
  private batch: PrefixRecordBatch = new PrefixRecordBatch();
  private log: SharedPrefixLog = new SharedPrefixLog();
  private bytes: HostBytes = new HostBytes();

  constructor() {
    this.log.writer = LINK_WRITER;
  }

  /** Appends the workers' records since the last report as Hello.prefix_records; false when there are none. */
  report(hello: ProtoWriter): bool {
    if (!getSharedData(PREFIX_LOG_KEY, this.bytes)) return false;
    const records = new ProtoWriter();
    const n = this.reporter.encode(this.bytes.ptr, this.bytes.len, LINK_WRITER, records);
    this.bytes.release();
    if (n == 0) return false;
    hello.bytesField(HELLO_PREFIX_RECORDS, records.finish());
    return true;
  }

  /** A fan-out's peer_prefix_records, appended to the log; false if they do not decode (the caller drops the stream). */
  apply(ptr: usize, len: i32): bool {
    if (!this.batch.decode(ptr, len)) return false;
    // Contended past the retries: these hints are lost, as the workers' own would be.
    if (this.batch.count > 0) this.log.append(this.batch.decisions, this.batch.count, null);
    return true;
  }
}
