/* Hamming distances over arrays of 64-bit fingerprints. */
#include "_internal.h"

SS__CLONES
void ss_hamming_one(uint64_t q, const uint64_t *fps, size_t n, uint8_t *out) {
    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)__builtin_popcountll(q ^ fps[i]);
}

SS__CLONES
void ss_hamming_pairwise(const uint64_t *a, const uint64_t *b, size_t n,
                         uint8_t *out) {
    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)__builtin_popcountll(a[i] ^ b[i]);
}

SS__CLONES
size_t ss_hamming_within(uint64_t q, const uint64_t *fps, size_t n, int k,
                         int64_t *out_idx, uint8_t *out_dist) {
    size_t m = 0;
    if (k < 0) return 0;
    for (size_t i = 0; i < n; i++) {
        int d = __builtin_popcountll(q ^ fps[i]);
        if (d <= k) {
            out_idx[m] = (int64_t)i;
            if (out_dist) out_dist[m] = (uint8_t)d;
            m++;
        }
    }
    return m;
}
