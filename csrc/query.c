/* Store query helpers: permute one query for every table, and verify
 * candidate keys read from LMDB (big-endian bytes) without decoding them in
 * Python. */
#include "simstore.h"

void ss_permute_tables(uint64_t q, int ntables, int nblocks,
                       const uint8_t *src_shift, const uint8_t *width,
                       const uint8_t *dst_shift, uint64_t *out) {
    for (int t = 0; t < ntables; t++) {
        const uint8_t *s = src_shift + (size_t)t * nblocks;
        const uint8_t *w = width + (size_t)t * nblocks;
        const uint8_t *d = dst_shift + (size_t)t * nblocks;
        uint64_t y = 0;
        for (int j = 0; j < nblocks; j++) {
            uint64_t mask = w[j] >= 64 ? ~0ULL : ((1ULL << w[j]) - 1);
            y |= ((q >> s[j]) & mask) << d[j];
        }
        out[t] = y;
    }
}

static uint64_t load_be64(const uint8_t *p) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) x = (x << 8) | p[i];
    return x;
}

size_t ss_verify_be_keys(const uint8_t *keys, size_t n, uint64_t q, int k,
                         int64_t *out_idx, uint8_t *out_dist) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int d = __builtin_popcountll(load_be64(keys + 8 * i) ^ q);
        if (d <= k) {
            out_idx[m] = (int64_t)i;
            if (out_dist) out_dist[m] = (uint8_t)d;
            m++;
        }
    }
    return m;
}
