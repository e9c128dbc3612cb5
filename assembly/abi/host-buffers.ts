// Memory for what the host returns. Envoy allocates every buffer it hands
// us through our `malloc` export, and nearly all of them are read and let go
// within the same callback: a streamed answer's chunk tail comes once per
// chunk, and the allocator's split, merge and free lists cost several
// hundred instructions each time. So a few spare blocks serve the host's
// requests while they are free (a request's body is still held when the
// in-flight table is read: two at once); the rest go to the heap as before.
// Every buffer from the host is let go through freeHostBuffer(), or handed
// to keepHostBuffer() when it outlives the callback.

const SPARES = 2;
/** A spare grows to the largest request up to this (a chunk's tail, a header map, a small body). */
const SPARE_MAX: usize = 16 * 1024;
const SPARE_MIN: usize = 2 * 1024;

const spares = new StaticArray<usize>(SPARES);
const sizes = new StaticArray<usize>(SPARES);
const taken = new StaticArray<bool>(SPARES);

/** A buffer of `size` bytes for the host to fill. */
export function hostBuffer(size: usize): usize {
  if (size > SPARE_MAX) return heap.alloc(size);
  for (let i = 0; i < SPARES; i++) {
    if (unchecked(taken[i])) continue;
    if (size > unchecked(sizes[i])) {
      const ptr = unchecked(spares[i]);
      if (ptr != 0) heap.free(ptr);
      const grown = max(size, SPARE_MIN);
      unchecked(sizes[i] = grown);
      unchecked(spares[i] = heap.alloc(grown));
    }
    unchecked(taken[i] = true);
    return unchecked(spares[i]);
  }
  return heap.alloc(size);
}

/** The buffer at `ptr` is kept past this callback: if it is a spare, it stops being one (the next read makes another). */
export function keepHostBuffer(ptr: usize): void {
  for (let i = 0; i < SPARES; i++) {
    if (unchecked(spares[i]) != ptr) continue;
    unchecked(spares[i] = 0);
    unchecked(sizes[i] = 0);
    unchecked(taken[i] = false);
    return;
  }
}

/** Lets go of a buffer hostBuffer() gave. */
export function freeHostBuffer(ptr: usize): void {
  for (let i = 0; i < SPARES; i++) {
    if (unchecked(spares[i]) != ptr) continue;
    unchecked(taken[i] = false);
    return;
  }
  heap.free(ptr);
}
