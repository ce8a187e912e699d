/* Exact Jaccard similarity of shingle-hash sets.
 *
 * A document's set is its distinct 64-bit feature hashes (the shingles of the
 * fingerprint pipeline, csrc/simhash.c), sorted ascending, so that two sets
 * meet in one linear merge. ss_shingle_sets makes the sets of many texts in
 * one call; ss_jaccard_pairs measures many candidate pairs in one call and,
 * given a threshold, stops early on pairs that provably fall below it (the
 * size bound min/max >= J, and the misses budget of the merge).
 */
#include <stdlib.h>
#include <string.h>

#include "_internal.h"

#define SMALL_SORT 48

static void insertion_sort(uint64_t *a, size_t n) {
    for (size_t i = 1; i < n; i++) {
        uint64_t x = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1] > x) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* Sorts a[0..n) ascending: LSD radix sort, 8 bits a pass, tmp holds n words.
 * A pass whose byte is the same in every value is skipped. */
static void radix_sort(uint64_t *a, uint64_t *tmp, size_t n) {
    uint64_t *src = a, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 8) {
        size_t count[257] = {0};
        for (size_t i = 0; i < n; i++) count[((src[i] >> shift) & 255) + 1]++;
        if (count[((src[0] >> shift) & 255) + 1] == n) continue;
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (size_t i = 0; i < n; i++) dst[count[(src[i] >> shift) & 255]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, n * sizeof(uint64_t));
}

/* Sorts a[0..n) ascending (tmp: n words; count: BUCKET_MAX + 1 words). Feature
 * hashes are uniform, so one counting pass on the top bits into about n / 2
 * buckets leaves a few values per bucket, which an insertion sort settles in
 * linear expected time; a bucket fuller than BUCKET_FULL (crafted input) sends
 * the set to the radix sort instead. */
#define BUCKET_BITS_MAX 16
#define BUCKET_FULL 64
static void sort_u64(uint64_t *a, uint64_t *tmp, size_t *count, size_t n) {
    if (n <= SMALL_SORT) {
        insertion_sort(a, n);
        return;
    }
    int bits = 1;
    while (bits < BUCKET_BITS_MAX && ((size_t)2 << bits) <= n) bits++;
    size_t nb = (size_t)1 << bits;
    int shift = 64 - bits;
    memset(count, 0, (nb + 1) * sizeof(size_t));
    for (size_t i = 0; i < n; i++) count[(a[i] >> shift) + 1]++;
    for (size_t b = 0; b < nb; b++) {
        if (count[b + 1] > BUCKET_FULL) {
            radix_sort(a, tmp, n);
            return;
        }
        count[b + 1] += count[b];
    }
    for (size_t i = 0; i < n; i++) tmp[count[a[i] >> shift]++] = a[i];
    insertion_sort(tmp, n);
    memcpy(a, tmp, n * sizeof(uint64_t));
}

int64_t ss_shingle_sets(const uint8_t *text, const int64_t *offsets,
                        size_t ndocs, int ngram, uint32_t seed, int unicode,
                        uint64_t *out_hashes, size_t cap,
                        int64_t *out_offsets) {
    ss__text_scratch s;
    if (ngram < 1) return -2;
    for (size_t d = 0; d < ndocs; d++)
        if (offsets[d + 1] < offsets[d]) return -2;
    if (ss__text_scratch_alloc(&s, offsets, ndocs) != 0) return -1;
    size_t tmpcap = 0;
    uint64_t *tmp = NULL;
    size_t *count = malloc((((size_t)1 << BUCKET_BITS_MAX) + 1) * sizeof(size_t));
    int64_t pos = 0, rc = 0;
    if (count == NULL) rc = -1;
    out_offsets[0] = 0;
    for (size_t d = 0; d < ndocs && rc == 0; d++) {
        size_t nd = 0;
        uint64_t fp;
        if (ss__text_fingerprint(&s, text + offsets[d],
                                 (size_t)(offsets[d + 1] - offsets[d]), ngram,
                                 seed, 0, unicode, &fp, &nd) != 0) {
            rc = -1;
            break;
        }
        if (nd > tmpcap) {
            uint64_t *grown = realloc(tmp, nd * sizeof(uint64_t));
            if (grown == NULL) {
                rc = -1;
                break;
            }
            tmp = grown;
            tmpcap = nd;
        }
        sort_u64(s.hashes, tmp, count, nd);
        if ((size_t)pos + nd <= cap)
            memcpy(out_hashes + pos, s.hashes, nd * sizeof(uint64_t));
        pos += (int64_t)nd;
        out_offsets[d + 1] = pos;
    }
    free(tmp);
    free(count);
    ss__text_scratch_free(&s);
    return rc != 0 ? rc : pos;
}

/* |a & b| of two ascending sets, or -1 once more than budget values of a are
 * found missing from b (then the intersection is too small to matter). */
static int64_t intersect(const uint64_t *a, size_t na, const uint64_t *b,
                         size_t nb, int64_t budget) {
    size_t i = 0, j = 0;
    int64_t common = 0, missed = 0;
    while (i < na && j < nb) {
        uint64_t x = a[i], y = b[j];
        if (x == y) {
            common++;
            i++;
            j++;
        } else if (x < y) {
            i++;
            if (++missed > budget) return -1;
        } else {
            j++;
        }
    }
    return common;
}

int ss_jaccard_pairs(const uint64_t *ha, const int64_t *offa, size_t na,
                     const uint64_t *hb, const int64_t *offb, size_t nb,
                     const int64_t *pi, const int64_t *pj, size_t npairs,
                     double threshold, double *out) {
    if (!(threshold >= 0.0 && threshold <= 1.0)) return -2;
    for (size_t p = 0; p < npairs; p++)
        if (pi[p] < 0 || (size_t)pi[p] >= na || pj[p] < 0 || (size_t)pj[p] >= nb)
            return -2;
    for (size_t p = 0; p < npairs; p++) {
        int64_t lo_a = offa[pi[p]], hi_a = offa[pi[p] + 1];
        int64_t lo_b = offb[pj[p]], hi_b = offb[pj[p] + 1];
        if (hi_a < lo_a || hi_b < lo_b) return -2;
        const uint64_t *a = ha + lo_a, *b = hb + lo_b;
        size_t la = (size_t)(hi_a - lo_a), lb = (size_t)(hi_b - lo_b);
        if (la == 0 && lb == 0) {
            out[p] = 1.0;
            continue;
        }
        size_t small = la < lb ? la : lb, big = la < lb ? lb : la;
        /* (the slack keeps float rounding from ever refusing J == t) */
        if ((double)small < threshold * (double)big * (1.0 - 1e-12)) {
            out[p] = -1.0; /* J <= small / big < threshold */
            continue;
        }
        /* J >= t needs |a & b| >= t (la + lb) / (1 + t): at most la - that
         * values of a may be missing from b. */
        double need = threshold * (double)(la + lb) / (1.0 + threshold);
        int64_t budget = (int64_t)la - (int64_t)need + 1;
        int64_t common = intersect(a, la, b, lb, budget);
        if (common < 0) {
            out[p] = -1.0;
            continue;
        }
        double j = (double)common / (double)(la + lb - (size_t)common);
        out[p] = j;
    }
    return 0;
}
