// AssemblyScript's `abort` (failed assertion, out-of-bounds, OOM) must not be
// an unknown import, or V8 refuses the module. Log it through the host, then
// trap: Envoy's failure_policy decides what happens to the VM.
import { log, LogLevel } from "./hostcalls";

export function onAbort(message: string | null, file: string | null, line: u32, column: u32): void {
  log(LogLevel.Critical, "wasm abort: " + (message ? message! : "") + " at " + (file ? file! : "?") + ":" + line.toString() + ":" + column.toString());
  unreachable();
}
