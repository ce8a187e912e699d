/* Store query helpers: permute one query for every table, and verify
 * candidate keys read from LMDB (big-endian bytes) without decoding them in
 * Python. */
#include "simstore.h"

#include <stdlib.h>
#include <string.h>

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

size_t ss_verify_candidates(const uint8_t *keys, const uint8_t *tables,
                            size_t n, const uint8_t *qs_be, int ntables,
                            int k, int64_t *out_idx, uint8_t *out_dist) {
    uint64_t qs[64];
    size_t m = 0;
    if (ntables < 1 || ntables > 64) return 0;
    for (int t = 0; t < ntables; t++) qs[t] = load_be64(qs_be + 8 * (size_t)t);
    for (size_t i = 0; i < n; i++) {
        uint8_t t = tables[i];
        if (t >= ntables) continue;
        int d = __builtin_popcountll(load_be64(keys + 8 * i) ^ qs[t]);
        if (d <= k) {
            out_idx[m] = (int64_t)i;
            out_dist[m] = (uint8_t)d;
            m++;
        }
    }
    return m;
}

static void store_be64(uint8_t *p, uint64_t x) {
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)x;
        x >>= 8;
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int ss_query_ranges(uint64_t q, int ntables, int nblocks,
                    const uint8_t *src_shift, const uint8_t *width,
                    const uint8_t *dst_shift, const uint8_t *tails,
                    const uint64_t *masks, const int32_t *nmasks,
                    uint8_t *out) {
    uint64_t qp[64];
    uint64_t local[1024];
    size_t pos = 0;
    if (ntables < 1 || ntables > 64) return SS_EINVAL;
    ss_permute_tables(q, ntables, nblocks, src_shift, width, dst_shift, qp);
    for (int t = 0; t < ntables; t++) store_be64(out + 8 * (size_t)t, qp[t]);
    out += 8 * (size_t)ntables;
    for (int t = 0; t < ntables; t++) {
        int32_t n = nmasks[t];
        if (tails[t] > 63 || n < 0) return SS_EINVAL;
        uint64_t *los = local;
        if (n > 1024 && !(los = malloc((size_t)n * sizeof *los))) return SS_ENOMEM;
        uint64_t tailmask = (1ULL << tails[t]) - 1;
        uint64_t base = qp[t] & ~tailmask;
        for (int32_t i = 0; i < n; i++) los[i] = base ^ masks[i];
        if (n > 1) qsort(los, (size_t)n, sizeof los[0], cmp_u64);
        for (int32_t i = 0; i < n; i++) {
            store_be64(out + 16 * pos, los[i]);
            store_be64(out + 16 * pos + 8, los[i] | tailmask);
            pos++;
        }
        if (los != local) free(los);
        masks += n;
    }
    return 0;
}

/* Table fill (store bulk loads and rebuilds) ---------------------------- */

int ss_sort_table(const uint64_t *fps, const uint64_t *iids, size_t n,
                  int nblocks, const uint8_t *src_shift, const uint8_t *width,
                  const uint8_t *dst_shift, uint64_t *out_keys,
                  uint64_t *out_vals) {
    enum { BITS = 11, BUCKETS = 1 << BITS };
    if (nblocks < 1 || nblocks > 64) return SS_EINVAL;
    uint64_t *k0 = out_keys, *v0 = out_vals;
    uint64_t *k1 = malloc(n ? n * sizeof *k1 : 1), *v1 = malloc(n ? n * sizeof *v1 : 1);
    size_t *count = malloc(BUCKETS * sizeof *count);
    int rc = 0;
    if (!k1 || !v1 || !count) {
        rc = SS_ENOMEM;
        goto done;
    }
    ss_permute_blocks(fps, n, nblocks, src_shift, width, dst_shift, k0);
    for (size_t i = 0; i < n; i++) v0[i] = iids[i];
    /* Stable LSD radix sort by key, 11 bits a pass: equal keys keep their
     * input order, so ids given ascending stay ascending under each key. */
    for (int shift = 0; shift < 64; shift += BITS) {
        size_t sum = 0;
        for (size_t b = 0; b < BUCKETS; b++) count[b] = 0;
        for (size_t i = 0; i < n; i++) count[(k0[i] >> shift) & (BUCKETS - 1)]++;
        if (count[(n ? k0[0] >> shift : 0) & (BUCKETS - 1)] == n) continue;
        for (size_t b = 0; b < BUCKETS; b++) {
            size_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) {
            size_t at = count[(k0[i] >> shift) & (BUCKETS - 1)]++;
            k1[at] = k0[i];
            v1[at] = v0[i];
        }
        uint64_t *t = k0; k0 = k1; k1 = t;
        t = v0; v0 = v1; v1 = t;
    }
    if (k0 != out_keys) {
        memcpy(out_keys, k0, n * sizeof *k0);
        memcpy(out_vals, v0, n * sizeof *v0);
        k1 = k0;  /* the scratch buffers, to free */
        v1 = v0;
    }
done:
    free(k1);
    free(v1);
    free(count);
    return rc;
}
