// The routing headers a request leaves with, written to Envoy in one host
// call (proxy_set_header_map_pairs replaces the whole map) instead of one
// call per header: the headers Envoy has now are the pairs read when the
// request began less the client's x-gateway-* ones (dropped then), so the new
// map is those pairs, without any the filter sets, plus the ones it sets.
// Assembled in a buffer kept from one request to the next.
import { MapType, setHeaderPairsRaw } from "../abi/hostcalls";
import { PairsReader } from "../abi/pairs";
import { startsWithAscii } from "../core/openai/routes";
import { GATEWAY_HEADER_PREFIX } from "../core/wire/contract.generated";

// The most the filter sets on one request: pool, model name, base model, destination, content-length, stream route, per-try timeout, decision.
const MAX_SET = 8;

export class RequestHeaderWriter {
  private names: StaticArray<usize> = new StaticArray<usize>(MAX_SET);
  private nameLens: StaticArray<i32> = new StaticArray<i32>(MAX_SET);
  private values: StaticArray<usize> = new StaticArray<usize>(MAX_SET);
  private valueLens: StaticArray<i32> = new StaticArray<i32>(MAX_SET);
  private count: i32 = 0;
  private pairs: PairsReader = new PairsReader();
  private out: ArrayBuffer = new ArrayBuffer(2048);

  /** Starts a new set of headers. */
  begin(): void {
    this.count = 0;
  }

  /** Sets `name` to the bytes [ptr, ptr + len), which must stay alive until write(). */
  set(name: ArrayBuffer, ptr: usize, len: i32): void {
    const i = this.count++;
    unchecked(this.names[i] = changetype<usize>(name));
    unchecked(this.nameLens[i] = name.byteLength);
    unchecked(this.values[i] = ptr);
    unchecked(this.valueLens[i] = len);
  }

  setBytes(name: ArrayBuffer, value: ArrayBuffer): void {
    this.set(name, changetype<usize>(value), value.byteLength);
  }

  /** The request headers: `original` (as read when the request began) with the headers set since begin(). */
  write(originalPtr: usize, originalLen: i32): void {
    const pairs = this.pairs;
    let n = this.count;
    let size: usize = 4;
    for (let i = 0; i < this.count; i++) size += 10 + <usize>unchecked(this.nameLens[i]) + <usize>unchecked(this.valueLens[i]);
    if (pairs.reset(originalPtr, originalLen)) {
      while (pairs.next()) {
        if (this.replaces(pairs.keyPtr, pairs.keyLen)) continue;
        n++;
        size += 10 + <usize>pairs.keyLen + <usize>pairs.valueLen;
      }
    }
    if (<usize>this.out.byteLength < size) this.out = new ArrayBuffer(<i32>size * 2);
    const base = changetype<usize>(this.out);
    store<u32>(base, <u32>n);
    let sizes = base + 4;
    let cursor = base + 4 + <usize>n * 8;
    if (pairs.reset(originalPtr, originalLen)) {
      while (pairs.next()) {
        if (this.replaces(pairs.keyPtr, pairs.keyLen)) continue;
        cursor = put(sizes, cursor, pairs.keyPtr, pairs.keyLen, pairs.valuePtr, pairs.valueLen);
        sizes += 8;
      }
    }
    for (let i = 0; i < this.count; i++) {
      cursor = put(sizes, cursor, unchecked(this.names[i]), unchecked(this.nameLens[i]), unchecked(this.values[i]), unchecked(this.valueLens[i]));
      sizes += 8;
    }
    setHeaderPairsRaw(MapType.RequestHeaders, base, <i32>(cursor - base));
  }

  /** A header of the original map that does not go out as it came: a client's x-gateway-* or one set here. */
  private replaces(ptr: usize, len: i32): bool {
    if (startsWithAscii(ptr, len, GATEWAY_HEADER_PREFIX)) return true;
    for (let i = 0; i < this.count; i++) {
      if (unchecked(this.nameLens[i]) == len && memory.compare(unchecked(this.names[i]), ptr, <usize>len) == 0) return true;
    }
    return false;
  }
}

function put(sizes: usize, cursor: usize, keyPtr: usize, keyLen: i32, valuePtr: usize, valueLen: i32): usize {
  store<u32>(sizes, <u32>keyLen);
  store<u32>(sizes + 4, <u32>valueLen);
  memory.copy(cursor, keyPtr, <usize>keyLen);
  cursor += <usize>keyLen;
  store<u8>(cursor++, 0);
  memory.copy(cursor, valuePtr, <usize>valueLen);
  cursor += <usize>valueLen;
  store<u8>(cursor++, 0);
  return cursor;
}

/** Writes `v` in decimal into `out` (at least 10 bytes); returns the digit count. */
export function decimalInto(out: ArrayBuffer, v: u32): i32 {
  let digits = 1;
  for (let t = v; t >= 10; t /= 10) digits++;
  const base = changetype<usize>(out);
  let t = v;
  for (let i = digits - 1; i >= 0; i--) {
    store<u8>(base + <usize>i, <u8>(0x30 + t % 10));
    t /= 10;
  }
  return digits;
}
