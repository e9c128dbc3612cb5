// The emulator's instruction counter on a module assembled by hand, whose
// executed instruction count is known exactly.
import { describe, expect, it } from "vitest";
import { instrumentInstructionCount, INSTRUCTION_COUNTER_EXPORT } from "../../testing/proxy-wasm-emulator/index.js";

// (func (export "loop") (param i32) (loop (br_if 0 (local.tee 0 (i32.sub (local.get 0) (i32.const 1))))))
// (func (export "pick") (param i32) (result i32) (if (result i32) (local.get 0) (then (i32.const 7)) (else (i32.const 8) (i32.const 1) (i32.add))))
// plus one mutable global. A call of loop(n) runs 1 (loop) + 5 per pass + 2 (end, end);
// pick(1) runs local.get, if, i32.const, else (which jumps past the if's end), then the function's end = 5;
// pick(0) runs local.get, if, the else arm's 3, end, end = 7.
const MODULE = Uint8Array.from([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
  0x01, 0x0a, 0x02, 0x60, 0x01, 0x7f, 0x00, 0x60, 0x01, 0x7f, 0x01, 0x7f, // types
  0x03, 0x03, 0x02, 0x00, 0x01, // functions
  0x06, 0x06, 0x01, 0x7f, 0x01, 0x41, 0x00, 0x0b, // one global
  0x07, 0x0f, 0x02, 0x04, 0x6c, 0x6f, 0x6f, 0x70, 0x00, 0x00, 0x04, 0x70, 0x69, 0x63, 0x6b, 0x00, 0x01, // exports
  0x0a, 0x20, 0x02,
  0x0e, 0x00, 0x03, 0x40, 0x20, 0x00, 0x41, 0x01, 0x6b, 0x22, 0x00, 0x0d, 0x00, 0x0b, 0x0b,
  0x0f, 0x00, 0x20, 0x00, 0x04, 0x7f, 0x41, 0x07, 0x05, 0x41, 0x08, 0x41, 0x01, 0x6a, 0x0b, 0x0b,
]);

describe("instruction counter", () => {
  const instance = new WebAssembly.Instance(new WebAssembly.Module(instrumentInstructionCount(MODULE)));
  const exports = instance.exports as { loop(n: number): void; pick(c: number): number } & Record<string, unknown>;
  const counter = exports[INSTRUCTION_COUNTER_EXPORT] as WebAssembly.Global;
  const executed = (run: () => void) => {
    const before = counter.value as bigint;
    run();
    return Number((counter.value as bigint) - before);
  };

  it("counts every instruction a loop executes, pass by pass", () => {
    expect(executed(() => exports.loop(1))).toBe(8);
    expect(executed(() => exports.loop(10))).toBe(53);
    expect(executed(() => exports.loop(1000))).toBe(5003);
  });

  it("counts only the branch an if takes, and keeps the module's behaviour", () => {
    let result = 0;
    expect(executed(() => (result = exports.pick(1)))).toBe(5);
    expect(result).toBe(7);
    expect(executed(() => (result = exports.pick(0)))).toBe(7);
    expect(result).toBe(9);
  });

  it("refuses what is not a Wasm module", () => {
    expect(() => instrumentInstructionCount(Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]))).toThrow(/not a Wasm module/);
  });
});
