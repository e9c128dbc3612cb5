// The emulated gateway lives with the emulator, where the overhead bench can reach it too.
export * from "../../testing/proxy-wasm-emulator/gateway.js";
