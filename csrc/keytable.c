/* A multimap of 64-bit keys to 64-bit values in two caller-owned arrays of cap
 * slots (a power of two), by open addressing with linear probing: the band
 * entries of a process's recent docs, which a similarity lookup reads in the
 * same C call as the sorted levels (ss_similar_one), and which a single write
 * extends by one call instead of a Python dict insert per band.
 *
 * An empty slot holds the key SS_KEY_EMPTY (band entry keys, band << 32 |
 * key32 with band < 64, never reach it); a key may hold many values, each in
 * a slot of its own. */
#include "_internal.h"

static size_t slot_of(uint64_t key, size_t cap) {
    return (size_t)(ss__fmix64(key) & (uint64_t)(cap - 1));
}

static int table_ok(const uint64_t *keys, const uint64_t *vals, size_t cap) {
    return keys != NULL && vals != NULL && cap >= 2 && (cap & (cap - 1)) == 0;
}

int64_t ss_keytable_add(uint64_t *keys, uint64_t *vals, size_t cap, size_t used,
                        const uint64_t *ks, size_t n, const uint64_t *vs, size_t per) {
    if (!table_ok(keys, vals, cap) || (n && (ks == NULL || vs == NULL || per == 0)))
        return SS_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (ks[i] == SS_KEY_EMPTY) return SS_EINVAL; /* before any is added */
    if (used + n > cap / 2) return SS_EROOM; /* more room first: at most half full */
    for (size_t i = 0; i < n; i++) {
        size_t s = slot_of(ks[i], cap);
        while (keys[s] != SS_KEY_EMPTY) s = (s + 1) & (cap - 1);
        keys[s] = ks[i];
        vals[s] = vs[i / per];
    }
    return (int64_t)(used + n);
}

int64_t ss_keytable_find(const uint64_t *keys, const uint64_t *vals, size_t cap,
                         const uint64_t *qs, size_t nq, uint64_t *out, size_t outcap) {
    if (!table_ok(keys, vals, cap) || (nq && qs == NULL) || (outcap && out == NULL))
        return SS_EINVAL;
    size_t m = 0;
    for (size_t i = 0; i < nq; i++) {
        if (qs[i] == SS_KEY_EMPTY) continue;
        for (size_t s = slot_of(qs[i], cap); keys[s] != SS_KEY_EMPTY; s = (s + 1) & (cap - 1))
            if (keys[s] == qs[i]) {
                if (m < outcap) out[m] = vals[s];
                m++;
            }
    }
    return (int64_t)m;
}

int64_t ss_keytable_add_bands(uint64_t *keys, uint64_t *vals, size_t cap, size_t used,
                              const uint8_t *be32, size_t nbands, uint64_t val) {
    if (!table_ok(keys, vals, cap) || (nbands && be32 == NULL) || nbands > 64) return SS_EINVAL;
    uint64_t ks[64];
    for (size_t b = 0; b < nbands; b++) {
        const uint8_t *p = be32 + 4 * b;
        ks[b] = (uint64_t)b << 32 | (uint64_t)p[0] << 24 | (uint64_t)p[1] << 16
                | (uint64_t)p[2] << 8 | p[3];
    }
    return ss_keytable_add(keys, vals, cap, used, ks, nbands, &val, nbands ? nbands : 1);
}
