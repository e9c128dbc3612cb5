// Counts the Wasm instructions a module executes, exactly and the same on
// every run: rewrites the binary so that each straight-line run of
// instructions first adds its length to an exported i64 global. A run starts
// at a function's entry and after every instruction that can change where
// execution goes next (block, loop, if, else, end, br, br_if, br_table,
// return, unreachable); execution only ever enters a run at its start, so
// every instruction that executes is counted once, a call to the host as one.
const MAGIC = [0x00, 0x61, 0x73, 0x6d];
const SECTION = { import: 2, global: 6, export: 7, code: 10 } as const;
const EXTERNAL_GLOBAL = 3;
const I64 = 0x7e;
const OP = {
  unreachable: 0x00, block: 0x02, loop: 0x03, if: 0x04, else: 0x05, end: 0x0b, br: 0x0c, brIf: 0x0d, brTable: 0x0e,
  return: 0x0f, globalGet: 0x23, globalSet: 0x24, i64Const: 0x42, i64Add: 0x7c,
} as const;
const RUN_ENDS = new Set<number>([OP.unreachable, OP.block, OP.loop, OP.if, OP.else, OP.end, OP.br, OP.brIf, OP.brTable, OP.return]);

/** The export that holds the count. */
export const INSTRUCTION_COUNTER_EXPORT = "__executed_instructions";

class Reader {
  constructor(readonly bytes: Uint8Array, public pos = 0) {}

  byte(): number {
    if (this.pos >= this.bytes.length) throw new Error("wasm instruction counter: unexpected end of module");
    return this.bytes[this.pos++];
  }

  u32(): number {
    let result = 0;
    let shift = 0;
    for (;;) {
      const b = this.byte();
      result += (b & 0x7f) * 2 ** shift;
      if ((b & 0x80) === 0) return result;
      shift += 7;
    }
  }

  /** Skips a signed or unsigned LEB128 number. */
  skipLeb(): void {
    while (this.byte() & 0x80);
  }

  skip(n: number): void {
    this.pos += n;
  }

  name(): string {
    const len = this.u32();
    const s = Buffer.from(this.bytes.subarray(this.pos, this.pos + len)).toString("utf8");
    this.pos += len;
    return s;
  }
}

/** Appends without spreading: a code section is too long for one call's arguments. */
function append(out: number[], bytes: ArrayLike<number>): void {
  for (let i = 0; i < bytes.length; i++) out.push(bytes[i]);
}

function leb(value: number): number[] {
  const out: number[] = [];
  do {
    let b = value % 128;
    value = Math.floor(value / 128);
    if (value > 0) b |= 0x80;
    out.push(b);
  } while (value > 0);
  return out;
}

/** Signed LEB128, for i64.const of a small non-negative number. */
function sleb(value: number): number[] {
  const out: number[] = [];
  for (;;) {
    const b = value & 0x7f;
    value = Math.floor(value / 128);
    if (value === 0 && (b & 0x40) === 0) return [...out, b];
    out.push(b | 0x80);
  }
}

function skipLimits(r: Reader): void {
  const flags = r.byte();
  r.u32();
  if (flags & 1) r.u32();
}

function importedGlobals(content: Uint8Array): number {
  const r = new Reader(content);
  let globals = 0;
  for (let n = r.u32(); n > 0; n--) {
    r.name();
    r.name();
    const kind = r.byte();
    if (kind === 0) r.u32();
    else if (kind === 1) (r.byte(), skipLimits(r));
    else if (kind === 2) skipLimits(r);
    else if (kind === EXTERNAL_GLOBAL) (r.byte(), r.byte(), globals++);
    else if (kind === 4) (r.byte(), r.u32());
    else throw new Error(`wasm instruction counter: unknown import kind ${kind}`);
  }
  return globals;
}

function skipMemarg(r: Reader): void {
  r.u32();
  r.u32();
}

/** Moves past one instruction's immediates; `op` has been read. */
function skipImmediates(r: Reader, op: number): void {
  if (op === OP.block || op === OP.loop || op === OP.if) return r.skipLeb(); // block type: s33
  if (op === OP.br || op === OP.brIf) return void r.u32();
  if (op === OP.brTable) {
    for (let n = r.u32() + 1; n > 0; n--) r.u32();
    return;
  }
  if (op === 0x10 || op === 0x12 || op === 0xd2) return void r.u32(); // call, return_call, ref.func
  if (op === 0x11 || op === 0x13) return void (r.u32(), r.u32()); // call_indirect, return_call_indirect
  if (op === 0x1c) {
    for (let n = r.u32(); n > 0; n--) r.byte(); // select t*
    return;
  }
  if (op >= 0x20 && op <= 0x26) return void r.u32(); // locals, globals, table.get/set
  if (op >= 0x28 && op <= 0x3e) return skipMemarg(r);
  if (op === 0x3f || op === 0x40) return void r.u32(); // memory.size/grow
  if (op === 0x41 || op === 0x42) return r.skipLeb();
  if (op === 0x43) return r.skip(4);
  if (op === 0x44) return r.skip(8);
  if (op === 0xd0) return void r.byte(); // ref.null t
  if (op === 0xfc) return skipMisc(r, r.u32());
  if (op === 0xfd) return skipSimd(r, r.u32());
  if (op === 0xfe) {
    const sub = r.u32();
    return sub === 0x03 ? void r.byte() : skipMemarg(r); // atomic.fence, else a memory access
  }
  const plain = op <= 0x01 || op === OP.else || op === OP.end || op === OP.return || op === 0x1a || op === 0x1b ||
    (op >= 0x45 && op <= 0xc4) || op === 0xd1;
  if (!plain) throw new Error(`wasm instruction counter: unknown opcode 0x${op.toString(16)} at byte ${r.pos - 1}`);
}

function skipMisc(r: Reader, sub: number): void {
  if (sub <= 7) return; // saturating truncations
  if (sub === 8 || sub === 12 || sub === 14 || sub === 10) return void (r.u32(), r.u32()); // memory.init, table.init/copy, memory.copy
  if (sub === 9 || sub === 11 || sub === 13 || (sub >= 15 && sub <= 17)) return void r.u32();
  throw new Error(`wasm instruction counter: unknown 0xfc opcode ${sub}`);
}

function skipSimd(r: Reader, sub: number): void {
  if (sub <= 11 || sub === 92 || sub === 93) return skipMemarg(r);
  if (sub === 12 || sub === 13) return r.skip(16);
  if (sub >= 21 && sub <= 34) return void r.byte();
  if (sub >= 84 && sub <= 91) return void (skipMemarg(r), r.byte());
}

/** One function body with a count added at the start of every straight-line run. */
function instrumentBody(body: Uint8Array, counter: number): Uint8Array {
  const r = new Reader(body);
  for (let n = r.u32(); n > 0; n--) (r.u32(), r.byte());
  const out: number[] = [];
  append(out, body.subarray(0, r.pos));
  const counterIndex = leb(counter);
  let runStart = r.pos;
  let runLength = 0;
  const flush = () => {
    if (runLength > 0) {
      out.push(OP.globalGet, ...counterIndex, OP.i64Const, ...sleb(runLength), OP.i64Add, OP.globalSet, ...counterIndex);
      append(out, body.subarray(runStart, r.pos));
    }
    runStart = r.pos;
    runLength = 0;
  };
  while (r.pos < body.length) {
    const op = r.byte();
    skipImmediates(r, op);
    runLength++;
    if (RUN_ENDS.has(op)) flush();
  }
  flush();
  return Uint8Array.from(out);
}

function pushSection(out: number[], id: number, content: ArrayLike<number>): void {
  out.push(id, ...leb(content.length));
  append(out, content);
}

/** The module, rewritten to count executed instructions in the exported global INSTRUCTION_COUNTER_EXPORT. */
export function instrumentInstructionCount(wasm: Uint8Array): Uint8Array<ArrayBuffer> {
  if (!MAGIC.every((b, i) => wasm[i] === b)) throw new Error("wasm instruction counter: not a Wasm module");
  const sections: Array<{ id: number; content: Uint8Array }> = [];
  const r = new Reader(wasm, 8);
  while (r.pos < wasm.length) {
    const id = r.byte();
    const size = r.u32();
    sections.push({ id, content: wasm.subarray(r.pos, r.pos + size) });
    r.skip(size);
  }
  const find = (id: number) => {
    const s = sections.find((x) => x.id === id);
    if (!s) throw new Error(`wasm instruction counter: the module has no section ${id}`);
    return s;
  };
  const imports = sections.find((s) => s.id === SECTION.import);
  const globals = find(SECTION.global);
  const gr = new Reader(globals.content);
  const ownGlobals = gr.u32();
  const counter = (imports ? importedGlobals(imports.content) : 0) + ownGlobals;

  const out: number[] = [];
  append(out, wasm.subarray(0, 8));
  for (const s of sections) {
    if (s.id === SECTION.global) {
      const content = leb(ownGlobals + 1);
      append(content, s.content.subarray(gr.pos));
      content.push(I64, 0x01, OP.i64Const, 0x00, OP.end);
      pushSection(out, s.id, content);
    } else if (s.id === SECTION.export) {
      const er = new Reader(s.content);
      const count = er.u32();
      const name = Buffer.from(INSTRUCTION_COUNTER_EXPORT);
      const content = leb(count + 1);
      append(content, s.content.subarray(er.pos));
      content.push(...leb(name.length), ...name, EXTERNAL_GLOBAL, ...leb(counter));
      pushSection(out, s.id, content);
    } else if (s.id === SECTION.code) {
      const cr = new Reader(s.content);
      const content: number[] = [];
      const count = cr.u32();
      content.push(...leb(count));
      for (let i = 0; i < count; i++) {
        const size = cr.u32();
        const body = instrumentBody(s.content.subarray(cr.pos, cr.pos + size), counter);
        cr.skip(size);
        content.push(...leb(body.length));
        append(content, body);
      }
      pushSection(out, s.id, content);
    } else {
      pushSection(out, s.id, s.content);
    }
  }
  return Uint8Array.from(out);
}
