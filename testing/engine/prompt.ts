/**
 * Cheap tokenisation, two ways: `fixed`, exactly charsPerToken characters per
 * token (the fake pods, so tests size prompts exactly), or `words`, word
 * pieces as a BPE tokenizer cuts English: a space starts a token, and a run
 * of other characters is cut every WORD_PIECE of them (about 4.5 characters
 * per token on the simulator's corpus, varying with the words), so a block
 * of tokens covers a different number of bytes from one text to the next,
 * as in a real engine, and a router's byte-based estimate is only that.
 * Block hashes are chained (block i covers block i-1's hash plus its own text)
 * and seeded by the model name, so two prompts share cached blocks exactly as
 * long as they share a block-aligned token prefix, and different models or
 * adapters never share blocks.
 */

export type Tokenizer = "fixed" | "words";

/** The longest run of non-space characters one `words` token covers. */
const WORD_PIECE = 5;

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

const SPACE = 32;

/**
 * Calls `onToken(end)` with the character offset where each `words` token
 * ends, in order; returns the token count.
 */
function wordPieces(text: string, onToken?: (end: number) => void): number {
  let tokens = 0;
  let run = 0;
  for (let i = 0; i < text.length; i++) {
    const space = text.charCodeAt(i) === SPACE;
    // A space, or a run that has reached WORD_PIECE characters, begins a new token.
    if (i > 0 && (space || run === WORD_PIECE)) {
      tokens++;
      onToken?.(i);
      run = 0;
    }
    if (!space) run++;
  }
  if (text.length > 0) {
    tokens++;
    onToken?.(text.length);
  }
  return tokens;
}

export function countTokens(text: string, charsPerToken: number, tokenizer: Tokenizer = "fixed"): number {
  if (tokenizer === "words") return Math.max(1, wordPieces(text));
  return Math.max(1, Math.ceil(text.length / charsPerToken));
}

/** Hashes of the prompt's full blocks only (a partial tail block is never cached). */
export function blockHashes(text: string, seed: string, blockSize: number, charsPerToken: number, tokenizer: Tokenizer = "fixed"): number[] {
  const hashes: number[] = [];
  let h = chainHash(0, seed);
  if (tokenizer === "words") {
    let start = 0;
    let n = 0;
    wordPieces(text, (end) => {
      if (++n % blockSize !== 0) return;
      h = chainHash(h, text, start, end);
      hashes.push(h);
      start = end;
    });
    return hashes;
  }
  const blockChars = blockSize * charsPerToken;
  const full = Math.floor(text.length / blockChars);
  for (let i = 0; i < full; i++) {
    h = chainHash(h, text, i * blockChars, (i + 1) * blockChars);
    hashes.push(h);
  }
  return hashes;
}
