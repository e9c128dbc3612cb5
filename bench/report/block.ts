// A generated block of BENCHMARKS.md: what lies between `<!-- KEY:start -->`
// and `<!-- KEY:end -->`. A run rewrites only that; the text around it is
// written by hand.

export const startMarker = (key: string) => `<!-- ${key}:start -->`;
export const endMarker = (key: string) => `<!-- ${key}:end -->`;

/**
 * Replaces the block's content; a block not yet in the document is appended
 * (under `heading`, if given). A blank line stays before the end marker: a
 * table running into it would take the marker for one more row.
 */
export function replaceBlock(doc: string, key: string, content: string, heading?: string): string {
  const a = doc.indexOf(startMarker(key));
  const b = doc.indexOf(endMarker(key));
  const block = `${startMarker(key)}\n${content.trim()}\n\n${endMarker(key)}`;
  if (a >= 0 && b > a) return doc.slice(0, a) + block + doc.slice(b + endMarker(key).length);
  return `${doc.trimEnd()}\n\n${heading ? `${heading}\n\n` : ""}${block}\n`;
}

/** The block's content, trimmed; null if the document has no such block. */
export function blockContent(doc: string, key: string): string | null {
  const a = doc.indexOf(startMarker(key));
  const b = doc.indexOf(endMarker(key));
  return a >= 0 && b > a ? doc.slice(a + startMarker(key).length, b).trim() : null;
}
