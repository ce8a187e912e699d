/* One document at a time: the text pipeline of one text in one call, and the
 * sketch check of a similarity lookup's candidate records.
 *
 * The text functions run the batch functions on a batch of one (offsets on
 * the stack), so a single document gets exactly the batch's answer; their
 * outputs are packed in one buffer so a caller allocates once per call. */
#include "_internal.h"

enum { SS_MAX_BANDS = 64 }; /* FingerprintConfig allows 1..64 bands */

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
    if (sketch_bits < 64 || bands < 1) return SS_EINVAL;
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

static int32_t sketch_distance(const uint64_t *q, int words, const uint8_t *s) {
    int32_t d = 0;
    for (int k = 0; k < words; k++)
        d += __builtin_popcountll(q[k] ^ load_le64(s + 8 * (size_t)k));
    return d;
}

SS__CLONES
int64_t ss_sketch_hits(const uint64_t *q, const ss_docs_layout *layout,
                       const uint8_t *recs, const int64_t *ends, size_t n, int maxd,
                       int64_t *out_idx, int32_t *out_dist, int64_t *out_bad) {
    if (!layout || layout->words < 1 || layout->words > 64 || maxd < 0 || !out_bad)
        return SS_EINVAL;
    int words = layout->words;
    size_t start = layout->sketch_start, stop = start + 8 * (size_t)words;
    int64_t m = 0, from = 0;
    *out_bad = -1;
    for (size_t i = 0; i < n; i++) {
        int64_t end = ends[i];
        if (end < from) return SS_EINVAL;
        if ((size_t)(end - from) < stop) {
            *out_bad = (int64_t)i;
            return SS_EBADCODE;
        }
        int32_t d = sketch_distance(q, words, recs + from + start);
        if (d <= maxd) {
            out_idx[m] = (int64_t)i;
            out_dist[m] = d;
            m++;
        }
        from = end;
    }
    return m;
}

/* Sort a few values and drop repeats: how many distinct remain. */
static size_t sort_unique(uint64_t *v, size_t n) {
    for (size_t i = 1; i < n; i++) { /* insertion sort: a lookup finds a few dozen */
        uint64_t x = v[i];
        size_t j = i;
        for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
        v[j] = x;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || v[m - 1] != v[i]) v[m++] = v[i];
    return m;
}

/* Whether a docs layout holds together: the fingerprint and the sketch before
 * the time of storage, the id after it. */
static int layout_ok(const ss_docs_layout *l) {
    return l->words >= 1 && l->words <= 64 && l->fp_start >= 1
           && l->sketch_start + 8 * (size_t)l->words <= l->at_start
           && l->fp_start + 8 <= l->at_start && l->at_start + 8 <= l->id_start;
}

SS__CLONES
int64_t ss_similar_one(const ss_runset *sets, size_t nsets, ss_need *need,
                       const ss_keytable_view *recent, const ss_map_tree *tree,
                       const ss_docs_layout *layout, const ss_similar_query *query,
                       ss_similar_room *room) {
    uint64_t keys[SS_MAX_BANDS];
    if (!recent || !tree || !layout || !query || !room || !layout_ok(layout))
        return SS_EINVAL;
    size_t nbands = query->nbands, cap = room->cap;
    uint64_t *cands = room->cands;
    if (nbands == 0 || nbands > SS_MAX_BANDS || !query->bands || !query->sketch
        || (recent->cap && (!recent->keys || !recent->vals)) || !cands || !room->hits
        || query->maxd < 0)
        return SS_EINVAL;
    for (size_t b = 0; b < nbands; b++) /* a band entry's key: band << 32 | low half */
        keys[b] = (uint64_t)b << 32 | (query->bands[b] & 0xFFFFFFFFu);
    int64_t m = ss_lookup(sets, nsets, keys, nbands, cands, cap, need);
    if (m < 0) return m;
    int64_t r = 0; /* the recent docs' entries, after the levels' */
    if (recent->cap) {
        size_t room_left = (uint64_t)m < cap ? cap - (size_t)m : 0;
        r = ss_keytable_find(recent->keys, recent->vals, recent->cap, keys, nbands,
                             cands + (cap - room_left), room_left);
        if (r < 0) return r;
    }
    room->ncands = m + r;
    if ((uint64_t)room->ncands > cap) return SS_EROOM;
    size_t n = sort_unique(cands, (size_t)room->ncands);
    const uint8_t *map = tree->map;
    size_t fp_start = layout->fp_start, at_start = layout->at_start;
    int64_t since = query->since;
    int64_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t off = 0;
        uint32_t len = 0;
        if (ss_map_lookup(tree, &cands[i], 1, &off, &len) != SS_OK)
            return SS_EMAP;
        if (off == 0) continue; /* a removed doc's stale entry */
        const uint8_t *rec = map + off;
        if (len <= layout->id_start || rec[0] != (uint8_t)layout->tag)
            return SS_EMAP; /* LMDB's copy explains */
        if (since >= 0) {
            uint64_t at = 0;
            for (size_t b = 0; b < 8; b++) at = at << 8 | rec[at_start + b];
            if (at < (uint64_t)since) continue;
        }
        int32_t d = sketch_distance(query->sketch, layout->words, rec + layout->sketch_start);
        if (d > query->maxd) continue;
        uint64_t fp = 0;
        for (size_t b = 0; b < 8; b++) fp = fp << 8 | rec[fp_start + b];
        uint64_t *hit = room->hits + 5 * hits++;
        hit[0] = cands[i];
        hit[1] = (uint64_t)d;
        hit[2] = (uint64_t)off;
        hit[3] = len;
        hit[4] = fp;
    }
    return hits;
}
