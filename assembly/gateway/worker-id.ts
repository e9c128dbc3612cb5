// A number unique to this worker VM among all of the plugin's VMs in the
// Envoy process, taken from a shared-data counter with compare-and-swap.
// Root context ids cannot serve: every VM numbers its contexts from 1, so all
// workers would seed their tie-breaks alike and pile onto the same pod.
import { utf8 } from "../abi/hostcalls";
import { SharedValue } from "./shared-value";

const ATTEMPTS = 16;

export function takeWorkerId(): u32 {
  const counter = new SharedValue(utf8("llm_gateway.workers"));
  const value = new ArrayBuffer(4);
  const ptr = changetype<usize>(value);
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    let next: u32 = 1;
    if (counter.read()) {
      if (counter.bytes.len == 4) next = load<u32>(counter.bytes.ptr) + 1;
      counter.bytes.release();
    }
    store<u32>(ptr, next);
    if (counter.write(ptr, 4)) return next;
  }
  // Contended beyond reason: a value no counter reaches soon still differs from the others'.
  return 0xffff0000 | <u32>(ptr & 0xffff);
}
