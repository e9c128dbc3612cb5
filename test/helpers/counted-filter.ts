// The filter built with its function names and instrumented so a test can
// count its allocations: every block the allocator hands out (TLSF
// allocateBlock: managed objects, and the buffers the host fills through
// the exported malloc) and, apart, those malloc calls. Deterministic, unlike
// any timing. binaryen comes with assemblyscript.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import binaryen from "binaryen";

const COUNTED = { alloc_count: "~lib/rt/tlsf/allocateBlock", malloc_count: "assembly/abi/exports/malloc" } as const;

/** build/filter.wasm's source compiled as the filter target, with names (--debug), and counters exported as functions. */
export function countedFilterModule(): WebAssembly.Module {
  const dir = mkdtempSync(join(tmpdir(), "counted-filter-"));
  try {
    const out = join(dir, "filter.wasm");
    execFileSync("npx", ["asc", "assembly/filter.ts", "--target", "filter", "--debug", "-o", out], { stdio: "pipe" });
    const mod = binaryen.readBinary(readFileSync(out));
    mod.setFeatures(binaryen.Features.All);
    for (const [counter, name] of Object.entries(COUNTED)) {
      const fn = mod.getFunction(name);
      if (fn === 0) throw new Error(`the filter build has no function ${name} to count`);
      const info = binaryen.getFunctionInfo(fn);
      mod.addGlobal(counter, binaryen.i32, true, mod.i32.const(0));
      const bump = mod.global.set(counter, mod.i32.add(mod.global.get(counter, binaryen.i32), mod.i32.const(1)));
      binaryen.Function.setBody(fn, mod.block(null, [bump, info.body], info.results));
      mod.addFunction(counter, binaryen.none, binaryen.i32, [], mod.global.get(counter, binaryen.i32));
      mod.addFunctionExport(counter, counter);
    }
    if (!mod.validate()) throw new Error("the instrumented filter does not validate");
    const bytes = mod.emitBinary();
    mod.dispose();
    return new WebAssembly.Module(bytes);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
