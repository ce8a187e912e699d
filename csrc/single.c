/* One document at a time: the text pipeline of one text in one call, and the
 * sketch check of a similarity lookup's candidate records.
 *
 * The text functions run the batch functions on a batch of one (offsets on
 * the stack), so a single document gets exactly the batch's answer; their
 * outputs are packed in one buffer so a caller allocates once per call. */
#include "_internal.h"

int ss_fingerprint_one(const uint8_t *text, size_t len, int ngram,
                       uint32_t seed, int weighting, int unicode,
                       uint64_t *out) {
    int64_t offsets[2] = {0, (int64_t)len};
    int64_t nfeat = 0;
    int rc = unicode ? ss_fingerprint_utf8(text, offsets, 1, ngram, seed,
                                           weighting, out, &nfeat)
                     : ss_fingerprint_texts(text, offsets, 1, ngram, seed,
                                            weighting, out, &nfeat);
    out[1] = (uint64_t)nfeat;
    return rc;
}

int ss_signature_one(const uint8_t *text, size_t len, int ngram, uint32_t seed,
                     int weighting, int unicode, int sketch_bits, int bands,
                     int rows, const uint32_t *sketch_table,
                     const uint32_t *band_table, uint64_t *out) {
    int64_t offsets[2] = {0, (int64_t)len};
    int64_t nfeat = 0;
    if (sketch_bits < 64 || bands < 1) return -2;
    size_t words = (size_t)sketch_bits / 64;
    uint64_t *sketch = out + 1, *keys = out + 1 + words;
    int rc = unicode
                 ? ss_signature_utf8(text, offsets, 1, ngram, seed, weighting,
                                     sketch_bits, bands, rows, sketch_table,
                                     band_table, out, sketch, keys, &nfeat)
                 : ss_signature_texts(text, offsets, 1, ngram, seed, weighting,
                                      sketch_bits, bands, rows, sketch_table,
                                      band_table, out, sketch, keys, &nfeat);
    out[1 + words + (size_t)bands] = (uint64_t)nfeat;
    return rc;
}

int64_t ss_shingle_set_one(const uint8_t *text, size_t len, int ngram,
                           uint32_t seed, int unicode, uint64_t *out_hashes,
                           size_t cap) {
    int64_t offsets[2] = {0, (int64_t)len};
    int64_t out_offsets[2];
    return ss_shingle_sets(text, offsets, 1, ngram, seed, unicode, out_hashes,
                           cap, out_offsets);
}

static uint64_t load_le64(const uint8_t *p) {
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = (x << 8) | p[i];
    return x;
}

SS__CLONES
int64_t ss_sketch_hits(const uint64_t *q, int words, const uint8_t *recs,
                       const int64_t *ends, size_t n, size_t start,
                       int maxd, int64_t *out_idx, int32_t *out_dist) {
    if (words < 1 || words > 64 || maxd < 0) return -2;
    size_t stop = start + 8 * (size_t)words;
    int64_t m = 0, from = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t end = ends[i];
        if (end < from) return -2;
        if ((size_t)(end - from) < stop) return -3 - (int64_t)i;
        const uint8_t *s = recs + from + start;
        int32_t d = 0;
        for (int k = 0; k < words; k++)
            d += __builtin_popcountll(q[k] ^ load_le64(s + 8 * (size_t)k));
        if (d <= maxd) {
            out_idx[m] = (int64_t)i;
            out_dist[m] = d;
            m++;
        }
        from = end;
    }
    return m;
}
