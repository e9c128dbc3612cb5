// 64-bit hashes the core needs to agree on across workers and builds: FNV-1a
// for names and byte runs (stable, no seed to share), and a splitmix64
// finaliser to combine two hashes into a well-mixed rendezvous weight.

const FNV_OFFSET: u64 = 0xcbf29ce484222325;
const FNV_PRIME: u64 = 0x100000001b3;

/** FNV-1a over `len` bytes at `ptr`, continuing from `seed` (FNV_OFFSET to start). */
export function hashBytes(ptr: usize, len: i32, seed: u64 = FNV_OFFSET): u64 {
  let h = seed;
  for (let i = 0; i < len; i++) {
    h ^= <u64>load<u8>(ptr + <usize>i);
    h *= FNV_PRIME;
  }
  return h;
}

export function hashBuffer(b: ArrayBuffer): u64 {
  return hashBytes(changetype<usize>(b), b.byteLength);
}

/**
 * A 64-byte block folded into a running hash: the prefix keys hash up to
 * 16 KiB of prompt per request, the costliest step of a decision after the
 * body scan. Two lanes take alternate words, each word one xor and one
 * multiply (a bijection of the lane for a given word, so no two blocks that
 * differ in one word collide), and the finaliser spreads every bit of both.
 */
export function hashBlock64(ptr: usize, seed: u64): u64 {
  let a = seed;
  let b = seed ^ 0x9e3779b97f4a7c15;
  for (let i: usize = 0; i < 64; i += 16) {
    a = (a ^ load<u64>(ptr + i)) * 0xbf58476d1ce4e5b9;
    b = (b ^ load<u64>(ptr + i + 8)) * 0x94d049bb133111eb;
  }
  return mix64(a ^ rotl<u64>(b, 32));
}

/** splitmix64's finaliser: every input bit affects every output bit. */
export function mix64(x: u64): u64 {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9;
  x ^= x >> 27;
  x *= 0x94d049bb133111eb;
  x ^= x >> 31;
  return x;
}

/** Rendezvous (highest-random-weight) weight of `endpoint` for `key`: all workers rank pods alike for a key. */
export function rendezvous(key: u64, endpoint: u64): u64 {
  return mix64(key ^ mix64(endpoint));
}
