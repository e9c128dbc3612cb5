// One autocannon run against one Envoy, plus what autocannon's summary lacks:
// sub-millisecond latencies (its histogram keeps whole milliseconds, while its
// per-response event carries the hrtime duration) and the CPU time every
// process on the machine spent during the run.
import autocannon from "autocannon";
import { readFileSync } from "node:fs";

/** CPU seconds; null where /proc is not available. */
export interface CpuTimes {
  envoy: number | null;
  upstream: number | null;
  loadgen: number;
  /** All cores together, every process on the machine. */
  machine: number | null;
}

export interface RunResult {
  requests: number;
  ok: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  durationS: number;
  /** One entry per 2xx response. */
  latenciesMs: number[];
  cpu: CpuTimes;
}

export interface LoadTarget {
  url: string;
  envoyPid: number;
  upstreamPid: number;
}

export interface Load {
  body: string;
  connections: number;
  durationS: number;
}

// /proc reports CPU time in USER_HZ ticks, which Linux fixes at 100 for userspace.
const USER_HZ = 100;

function processCpu(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the parenthesised command name start at field 3 (state); utime is 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / USER_HZ;
  } catch {
    return null;
  }
}

function machineCpu(): number | null {
  try {
    const [user, nice, system, , , irq, softirq, steal] = readFileSync("/proc/stat", "utf8")
      .split("\n")[0]
      .trim()
      .split(/\s+/)
      .slice(1)
      .map(Number);
    return (user + nice + system + irq + softirq + steal) / USER_HZ;
  } catch {
    return null;
  }
}

function cpuNow(target: LoadTarget): CpuTimes {
  const own = process.cpuUsage();
  return {
    envoy: processCpu(target.envoyPid),
    upstream: processCpu(target.upstreamPid),
    loadgen: (own.user + own.system) / 1e6,
    machine: machineCpu(),
  };
}

const minus = (a: number | null, b: number | null) => (a === null || b === null ? null : a - b);

export async function runLoad(target: LoadTarget, load: Load): Promise<RunResult> {
  const latenciesMs: number[] = [];
  const before = cpuNow(target);
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(
      {
        url: target.url,
        method: "POST",
        headers: { "content-type": "application/json" },
        body: load.body,
        connections: load.connections,
        duration: load.durationS,
        // autocannon stops only on a sampling tick; the 1 s default would round every run up to whole seconds.
        sampleInt: 100,
      },
      (err, res) => (err ? reject(err) : resolve(res)),
    );
    instance.on("response", (_client, status, _bytes, ms) => {
      if (status >= 200 && status < 300) latenciesMs.push(ms);
    });
  });
  const after = cpuNow(target);
  return {
    requests: result.requests.total,
    ok: result["2xx"],
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    durationS: result.duration,
    latenciesMs,
    cpu: {
      envoy: minus(after.envoy, before.envoy),
      upstream: minus(after.upstream, before.upstream),
      loadgen: after.loadgen - before.loadgen,
      machine: minus(after.machine, before.machine),
    },
  };
}
