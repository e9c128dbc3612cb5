// Per-decision time of the routing core in its native build (build/native.wasm
// in Node's V8): body scan, model lookup and scoring, plus the native build's
// own JS<->wasm boundary (copying the body in, the JSON result string out and
// JSON.parse) that the Envoy filter does not pay in that form.
import { NativeRouter } from "../../testing/native/router.js";
import { benchSnapshot, chatBody } from "./workload.js";
import { nearestRank } from "../percentiles.js";

export interface NativeTiming {
  bodyBytes: number;
  /** 1 is the baseline: the picker returns a lone endpoint without scoring. */
  endpoints: number;
  decisions: number;
  p50Us: number;
  p99Us: number;
  meanUs: number;
}

const WARMUP_MS = 150;
const MEASURE_MS = 400;

export async function timeNativeDecisions(
  bodySizes: number[],
  endpointCounts: number[],
  progress: (line: string) => void,
): Promise<NativeTiming[]> {
  const router = await NativeRouter.load();
  const out: NativeTiming[] = [];
  const counts = [...new Set([1, ...endpointCounts])].sort((a, b) => a - b);
  for (const bodyBytes of bodySizes) {
    const body = Buffer.from(chatBody(bodyBytes));
    for (const endpoints of counts) {
      // Addresses are never dialled here; only their number matters.
      router.reset(1);
      router.setSnapshot(benchSnapshot(Array.from({ length: endpoints }, (_, i) => `10.0.${i >> 8}.${i & 255}:8000`)));
      const first = router.route(body);
      if (!("endpoint" in first)) throw new Error(`native router refused the bench body: ${JSON.stringify(first)}`);

      // Warm up until V8 has tiered the module up, then time call by call
      // (hrtime.bigint adds a few tens of ns to each sample).
      for (const end = performance.now() + WARMUP_MS; performance.now() < end; ) router.route(body);
      const samples: number[] = [];
      for (const end = performance.now() + MEASURE_MS; performance.now() < end; ) {
        const t0 = process.hrtime.bigint();
        router.route(body);
        samples.push(Number(process.hrtime.bigint() - t0));
      }
      const sorted = Float64Array.from(samples).sort();
      const timing: NativeTiming = {
        bodyBytes,
        endpoints,
        decisions: sorted.length,
        p50Us: nearestRank(sorted, 0.5) / 1e3,
        p99Us: nearestRank(sorted, 0.99) / 1e3,
        meanUs: sorted.reduce((a, b) => a + b, 0) / sorted.length / 1e3,
      };
      out.push(timing);
      progress(
        `native decision, ${bodyBytes} B body, ${endpoints} endpoint(s): ` +
          `p50 ${timing.p50Us.toFixed(2)} µs, mean ${timing.meanUs.toFixed(2)} µs (${timing.decisions} decisions)`,
      );
    }
  }
  return out;
}
