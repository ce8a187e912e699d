/* Simhash accumulation and the fused text -> fingerprint pipeline. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "simstore.h"

/* ---- accumulation ------------------------------------------------------ */

static uint64_t sign_bits_double(const double *acc) {
    uint64_t fp = 0;
    for (int b = 0; b < 64; b++)
        if (acc[b] > 0.0) fp |= 1ULL << b;
    return fp;
}

uint64_t ss_simhash(const uint64_t *hashes, const double *weights, size_t n) {
    if (weights == NULL) {
        /* count of set bits per position; bit is 1 iff set > clear */
        int64_t cnt[64] = {0};
        for (size_t i = 0; i < n; i++) {
            uint64_t h = hashes[i];
            for (int b = 0; b < 64; b++) cnt[b] += (int64_t)((h >> b) & 1);
        }
        uint64_t fp = 0;
        for (int b = 0; b < 64; b++)
            if (2 * cnt[b] > (int64_t)n) fp |= 1ULL << b;
        return fp;
    }
    double acc[64] = {0.0};
    for (size_t i = 0; i < n; i++) {
        uint64_t h = hashes[i];
        double w = weights[i];
        for (int b = 0; b < 64; b++) acc[b] += ((h >> b) & 1) ? w : -w;
    }
    return sign_bits_double(acc);
}

void ss_simhash_batch(const uint64_t *hashes, const double *weights,
                      const int64_t *offsets, size_t ndocs, uint64_t *out) {
    for (size_t d = 0; d < ndocs; d++) {
        int64_t lo = offsets[d], hi = offsets[d + 1];
        if (hi < lo) { out[d] = 0; continue; }
        out[d] = ss_simhash(hashes + lo, weights ? weights + lo : NULL,
                            (size_t)(hi - lo));
    }
}

/* ---- sorting (for distinct features and their counts) ------------------ */

static void insertion_sort(uint64_t *a, size_t n) {
    for (size_t i = 1; i < n; i++) {
        uint64_t v = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1] > v) { a[j] = a[j - 1]; j--; }
        a[j] = v;
    }
}

static void sort_u64(uint64_t *a, size_t n) {
    while (n > 24) {
        uint64_t x = a[0], y = a[n / 2], z = a[n - 1], p;
        p = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        size_t i = 0, j = n - 1;
        for (;;) {
            while (a[i] < p) i++;
            while (a[j] > p) j--;
            if (i >= j) break;
            uint64_t t = a[i]; a[i] = a[j]; a[j] = t;
            i++; j--;
        }
        /* recurse on the smaller side, loop on the larger */
        size_t left = j + 1;
        if (left < n - left) { sort_u64(a, left); a += left; n -= left; }
        else { sort_u64(a + left, n - left); n = left; }
    }
    insertion_sort(a, n);
}

/* ---- tokenizing -------------------------------------------------------- */

static inline int is_word_byte(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || c >= 0x80;
}

/* Copies the tokens of src[0..len) lower-cased into buf, separated by one
 * space; token t spans buf[starts[t] .. ends[t]). Returns the token count. */
static size_t tokenize(const uint8_t *src, size_t len, uint8_t *buf,
                       int64_t *starts, int64_t *ends) {
    size_t ntok = 0, w = 0, i = 0;
    while (i < len) {
        while (i < len && !is_word_byte(src[i])) i++;
        if (i >= len) break;
        if (ntok) buf[w++] = ' ';
        starts[ntok] = (int64_t)w;
        while (i < len && is_word_byte(src[i])) {
            uint8_t c = src[i++];
            if (c >= 'A' && c <= 'Z') c = (uint8_t)(c + 32);
            buf[w++] = c;
        }
        ends[ntok++] = (int64_t)w;
    }
    return ntok;
}

void ss_count_tokens(const uint8_t *text, const int64_t *offsets,
                     size_t ndocs, int64_t *out_ntokens) {
    for (size_t d = 0; d < ndocs; d++) {
        int64_t n = 0;
        int in_tok = 0;
        for (int64_t i = offsets[d]; i < offsets[d + 1]; i++) {
            int w = is_word_byte(text[i]);
            if (w && !in_tok) n++;
            in_tok = w;
        }
        out_ntokens[d] = n;
    }
}

static size_t n_features(size_t ntok, int ngram) {
    if (ntok == 0) return 0;
    return ntok >= (size_t)ngram ? ntok - (size_t)ngram + 1 : 1;
}

/* Hashes of the shingles of one tokenized document into out. */
static size_t shingle_hashes(const uint8_t *buf, const int64_t *starts,
                             const int64_t *ends, size_t ntok, int ngram,
                             uint32_t seed, uint64_t *out) {
    size_t nf = n_features(ntok, ngram);
    uint64_t h[2];
    for (size_t f = 0; f < nf; f++) {
        size_t last = f + (size_t)ngram - 1;
        if (last >= ntok) last = ntok - 1;
        int64_t s = starts[f], e = ends[last];
        ss_murmur3_x64_128(buf + s, (size_t)(e - s), seed, h);
        out[f] = h[0];
    }
    return nf;
}

typedef struct {
    uint8_t *buf;
    int64_t *starts, *ends;
    uint64_t *hashes;
} scratch_t;

static void scratch_free(scratch_t *s) {
    free(s->buf); free(s->starts); free(s->ends); free(s->hashes);
}

static int scratch_alloc(scratch_t *s, const int64_t *offsets, size_t ndocs) {
    size_t maxlen = 0;
    memset(s, 0, sizeof(*s));
    for (size_t d = 0; d < ndocs; d++) {
        if (offsets[d + 1] < offsets[d]) return -1;
        size_t l = (size_t)(offsets[d + 1] - offsets[d]);
        if (l > maxlen) maxlen = l;
    }
    /* a document of L bytes has at most (L + 1) / 2 tokens */
    size_t maxtok = maxlen / 2 + 2;
    s->buf = malloc(maxlen + 1);
    s->starts = malloc(maxtok * sizeof(int64_t));
    s->ends = malloc(maxtok * sizeof(int64_t));
    s->hashes = malloc(maxtok * sizeof(uint64_t));
    if (!s->buf || !s->starts || !s->ends || !s->hashes) {
        scratch_free(s);
        return -1;
    }
    return 0;
}

int ss_features(const uint8_t *text, const int64_t *offsets, size_t ndocs,
                int ngram, uint32_t seed, uint64_t *out_hashes,
                int64_t *out_offsets) {
    scratch_t s;
    if (ngram < 1 || scratch_alloc(&s, offsets, ndocs) != 0) return -1;
    int64_t pos = 0;
    out_offsets[0] = 0;
    for (size_t d = 0; d < ndocs; d++) {
        const uint8_t *src = text + offsets[d];
        size_t len = (size_t)(offsets[d + 1] - offsets[d]);
        size_t ntok = tokenize(src, len, s.buf, s.starts, s.ends);
        pos += (int64_t)shingle_hashes(s.buf, s.starts, s.ends, ntok, ngram,
                                       seed, out_hashes + pos);
        out_offsets[d + 1] = pos;
    }
    scratch_free(&s);
    return 0;
}

int ss_fingerprint_texts(const uint8_t *text, const int64_t *offsets,
                         size_t ndocs, int ngram, uint32_t seed,
                         int weighting, uint64_t *out,
                         int64_t *out_nfeatures) {
    scratch_t s;
    if (ngram < 1 || weighting < 0 || weighting > 2) return -1;
    if (scratch_alloc(&s, offsets, ndocs) != 0) return -1;
    for (size_t d = 0; d < ndocs; d++) {
        const uint8_t *src = text + offsets[d];
        size_t len = (size_t)(offsets[d + 1] - offsets[d]);
        size_t ntok = tokenize(src, len, s.buf, s.starts, s.ends);
        size_t nf = shingle_hashes(s.buf, s.starts, s.ends, ntok, ngram, seed,
                                   s.hashes);
        sort_u64(s.hashes, nf);
        /* compact to distinct hashes, counts into starts[] (reused) */
        size_t nd = 0;
        for (size_t i = 0; i < nf; i++) {
            if (nd && s.hashes[nd - 1] == s.hashes[i]) {
                s.starts[nd - 1]++;
            } else {
                s.hashes[nd] = s.hashes[i];
                s.starts[nd] = 1;
                nd++;
            }
        }
        out_nfeatures[d] = (int64_t)nd;
        if (weighting == 0) {
            out[d] = ss_simhash(s.hashes, NULL, nd);
        } else {
            int64_t acc[64] = {0};
            double facc[64] = {0.0};
            for (size_t i = 0; i < nd; i++) {
                uint64_t h = s.hashes[i];
                if (weighting == 1) {
                    int64_t c = s.starts[i];
                    for (int b = 0; b < 64; b++)
                        acc[b] += ((h >> b) & 1) ? c : -c;
                } else {
                    double w = 1.0 + log((double)s.starts[i]);
                    for (int b = 0; b < 64; b++)
                        facc[b] += ((h >> b) & 1) ? w : -w;
                }
            }
            uint64_t fp = 0;
            for (int b = 0; b < 64; b++)
                if (weighting == 1 ? acc[b] > 0 : facc[b] > 0.0)
                    fp |= 1ULL << b;
            out[d] = fp;
        }
    }
    scratch_free(&s);
    return 0;
}
