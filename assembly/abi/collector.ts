// When garbage is collected. The filter is built on AssemblyScript's minimal
// runtime: it keeps no shadow stack of references (the incremental runtime's
// bookkeeping cost about 40% of a routed request's instructions), so it may
// only collect while no reference lives on the Wasm stack, that is between
// the host's calls into the module. Every export enters and leaves through
// here, and the outermost leave() collects:
//   - once the heap had to grow since the last collection (garbage filled it);
//   - every TICKS_PER_COLLECTION ticks (about a second at the filter's 20 ms
//     tick), so garbage never builds up for long: a collection costs in
//     proportion to what is live (about 2M instructions with a 1000-pod
//     pool), and once a second that is a few thousandths of a core;
//   - every CALLS_PER_COLLECTION calls, should ticks not come.
// A call the host makes while another is running (a host call that calls
// back) never collects under its caller. Builds on another runtime collect
// on their own.
import { Runtime } from "shared/runtime";

const TICKS_PER_COLLECTION: u32 = 50;
const CALLS_PER_COLLECTION: u32 = 16384;

let depth: u32 = 0;
let calls: u32 = 0;
let ticks: u32 = 0;
let pagesAtCollection: i32 = memory.size();

/** At the start of every export the host calls. */
export function enter(): void {
  depth++;
}

/** At the end of every export the host calls, after its last use of any reference; `tick`: it was a timer tick. */
export function leave(tick: bool = false): void {
  if (--depth != 0 || ASC_RUNTIME != Runtime.Minimal) return;
  calls++;
  if (tick) ticks++;
  if (ticks < TICKS_PER_COLLECTION && calls < CALLS_PER_COLLECTION && memory.size() == pagesAtCollection) return;
  __collect();
  calls = 0;
  ticks = 0;
  pagesAtCollection = memory.size();
}
