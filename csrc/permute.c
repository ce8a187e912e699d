/* Block permutations of fingerprints: the table layouts' key transform. */
#include "simstore.h"

void ss_permute_blocks(const uint64_t *in, size_t n, int nblocks,
                       const uint8_t *src_shift, const uint8_t *width,
                       const uint8_t *dst_shift, uint64_t *out) {
    uint64_t mask[64];
    if (nblocks < 1 || nblocks > 64) return;
    for (int j = 0; j < nblocks; j++)
        mask[j] = width[j] >= 64 ? ~0ULL : ((1ULL << width[j]) - 1);
    for (size_t i = 0; i < n; i++) {
        uint64_t x = in[i], y = 0;
        for (int j = 0; j < nblocks; j++)
            y |= ((x >> src_shift[j]) & mask[j]) << dst_shift[j];
        out[i] = y;
    }
}
