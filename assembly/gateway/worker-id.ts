// A number unique to this worker VM among all of the plugin's VMs in the
// Envoy process, taken from a shared-data counter with compare-and-swap.
// Root context ids cannot serve: every VM numbers its contexts from 1, so all
// workers would seed their tie-breaks alike and pile onto the same pod.
import { getSharedData, HostBytes, lastCas, setSharedData, Status, utf8 } from "../abi/hostcalls";

const KEY = utf8("llm_gateway.workers");
const ATTEMPTS = 16;

export function takeWorkerId(): u32 {
  const bytes = new HostBytes();
  const value = new ArrayBuffer(4);
  const ptr = changetype<usize>(value);
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    let cas: u32 = 0;
    let next: u32 = 1;
    if (getSharedData(KEY, bytes)) {
      cas = lastCas();
      if (bytes.len == 4) next = load<u32>(bytes.ptr) + 1;
      bytes.release();
    }
    store<u32>(ptr, next);
    if (setSharedData(KEY, ptr, 4, cas) != Status.CasMismatch) return next;
  }
  // Contended beyond reason: a value no counter reaches soon still differs from the others'.
  return 0xffff0000 | <u32>(changetype<usize>(value) & 0xffff);
}
