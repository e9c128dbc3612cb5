/**
 * Cheap tokenisation: a prompt is text, ~charsPerToken characters per token.
 * Block hashes are chained (block i covers block i-1's hash plus its own text)
 * and seeded by the model name, so two prompts share cached blocks exactly as
 * long as they share a block-aligned text prefix, and different models or
 * adapters never share blocks.
 */

const TWO_32 = 4294967296;
const TWO_21 = 2097152;

/** 53-bit hash (fits a JS number exactly) of text[start,end) continuing from `prev`. */
export function chainHash(prev: number, text: string, start = 0, end = text.length): number {
  // Two independent 32-bit multiplicative lanes, each seeded from half of prev.
  let h1 = ((prev >>> 0) ^ 0x811c9dc5) | 0;
  let h2 = (Math.floor(prev / TWO_32) ^ 0x9e3779b9) | 0;
  for (let i = start; i < end; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 0x01000193);
    h2 = Math.imul(h2 ^ c, 0x5bd1e995);
  }
  // Final avalanche so short chunks still spread over all bits.
  h1 = Math.imul(h1 ^ (h1 >>> 16), 0x85ebca6b) ^ Math.imul(h2 ^ (h2 >>> 13), 0xc2b2ae35);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 0x85ebca6b) ^ Math.imul(h1 ^ (h1 >>> 13), 0xc2b2ae35);
  return ((h2 >>> 0) % TWO_21) * TWO_32 + (h1 >>> 0);
}

export function countTokens(text: string, charsPerToken: number): number {
  return Math.max(1, Math.ceil(text.length / charsPerToken));
}

/** Hashes of the prompt's full blocks only (a partial tail block is never cached). */
export function blockHashes(text: string, seed: string, blockSize: number, charsPerToken: number): number[] {
  const blockChars = blockSize * charsPerToken;
  const full = Math.floor(text.length / blockChars);
  const hashes = new Array<number>(full);
  let h = chainHash(0, seed);
  for (let i = 0; i < full; i++) {
    h = chainHash(h, text, i * blockChars, (i + 1) * blockChars);
    hashes[i] = h;
  }
  return hashes;
}
