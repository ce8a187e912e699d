/* MurmurHash3 x64 128-bit (Austin Appleby's public-domain algorithm),
 * written for simstore; output equals mmh3.hash128 / mmh3.hash64. */
#include <string.h>
#include "_internal.h"

static inline uint64_t rotl64(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t load64le(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

void ss_murmur3_x64_128(const uint8_t *data, size_t len, uint32_t seed,
                        uint64_t *out2) {
    const uint64_t c1 = 0x87c37b91114253d5ULL;
    const uint64_t c2 = 0x4cf5ad432745937fULL;
    const size_t nblocks = len / 16;
    uint64_t h1 = seed, h2 = seed;

    for (size_t i = 0; i < nblocks; i++) {
        uint64_t k1 = load64le(data + 16 * i);
        uint64_t k2 = load64le(data + 16 * i + 8);
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        h1 = rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        h2 = rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }

    const uint8_t *tail = data + 16 * nblocks;
    uint64_t k1 = 0, k2 = 0;
    size_t rest = len & 15;
    if (rest > 8) {
        for (size_t i = rest; i > 8; i--) k2 = (k2 << 8) | tail[i - 1];
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
    }
    if (rest > 0) {
        size_t top = rest > 8 ? 8 : rest;
        for (size_t i = top; i > 0; i--) k1 = (k1 << 8) | tail[i - 1];
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
    }

    h1 ^= (uint64_t)len; h2 ^= (uint64_t)len;
    h1 += h2; h2 += h1;
    h1 = ss__fmix64(h1); h2 = ss__fmix64(h2);
    h1 += h2; h2 += h1;
    out2[0] = h1;
    out2[1] = h2;
}

int ss_murmur3_many(const uint8_t *buf, const uint64_t *ends, size_t n, uint32_t seed,
                    uint64_t *out) {
    uint64_t start = 0, two[2];
    if (n && (!buf || !ends || !out)) return SS_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (ends[i] < start) return SS_EINVAL;
        ss_murmur3_x64_128(buf + start, (size_t)(ends[i] - start), seed, two);
        out[i] = two[0];
        start = ends[i];
    }
    return SS_OK;
}
