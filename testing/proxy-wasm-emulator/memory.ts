// Reads and writes a VM's linear memory the way proxy-wasm-cpp-host does:
// every access is bounds-checked (a bad pointer makes the host call return
// INVALID_MEMORY_ACCESS rather than trap), pointers and sizes are u32 words
// on wasm32, and anything returned to the plugin is copied into memory the
// plugin allocates itself (its `malloc` export).

export class GuestMemory {
  constructor(
    private readonly memory: WebAssembly.Memory,
    private readonly allocate: (size: number) => number,
  ) {}

  /** A fresh view: memory.grow (inside the plugin's malloc) detaches older ones. */
  private view(): Uint8Array {
    return new Uint8Array(this.memory.buffer);
  }

  /** A copy of [ptr, ptr + len), or null if it is out of bounds. */
  read(ptr: number, len: number): Uint8Array | null {
    const mem = this.view();
    if (ptr + len > mem.length) return null;
    return mem.slice(ptr, ptr + len);
  }

  readString(ptr: number, len: number): string | null {
    const bytes = this.read(ptr, len);
    return bytes === null ? null : Buffer.from(bytes).toString("utf8");
  }

  writeU32(ptr: number, value: number): boolean {
    const mem = this.view();
    if (ptr + 4 > mem.length) return false;
    new DataView(mem.buffer).setUint32(ptr, value >>> 0, true);
    return true;
  }

  writeU64(ptr: number, value: bigint): boolean {
    const mem = this.view();
    if (ptr + 8 > mem.length) return false;
    new DataView(mem.buffer).setBigUint64(ptr, value, true);
    return true;
  }

  /**
   * Hands bytes to the plugin (WasmBase::copyToPointerSize): allocated with
   * its malloc and copied, pointer and size stored at ptrPtr and sizePtr.
   * Nothing is allocated for zero bytes: pointer and size are both 0.
   */
  copyOut(bytes: Uint8Array, ptrPtr: number, sizePtr: number): boolean {
    let ptr = 0;
    if (bytes.length > 0) {
      ptr = this.allocate(bytes.length) >>> 0;
      if (ptr === 0 || ptr + bytes.length > this.view().length) return false;
      this.view().set(bytes, ptr);
    }
    return this.writeU32(ptrPtr, ptr) && this.writeU32(sizePtr, bytes.length);
  }
}
