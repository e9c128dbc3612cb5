// Insertion sort of a short prefix in place: the arrays sorted here (a
// shortlist's slots, a pool's known rates) are small, and this allocates nothing.

/** Sorts a[0..n) ascending; `A` is any indexable array (Array or StaticArray). */
export function sortPrefix<A>(a: A, n: i32): void {
  for (let i = 1; i < n; i++) {
    const v = unchecked(a[i]);
    let j = i - 1;
    while (j >= 0 && unchecked(a[j]) > v) {
      unchecked(a[j + 1] = a[j]);
      j--;
    }
    unchecked(a[j + 1] = v);
  }
}
