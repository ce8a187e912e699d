/* Simhash accumulation and the fused text -> fingerprint pipeline. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "_internal.h"

/* ---- accumulation ------------------------------------------------------ */

/* cnt[b] += number of hashes with bit b set (byte lanes flushed every 255). */
static void count_bits(const uint64_t *h, size_t n, const uint64_t *spread,
                       int64_t *cnt) {
    size_t i = 0;
    while (i < n) {
        size_t end = n - i > 255 ? i + 255 : n;
        uint64_t acc[8] = {0};
        for (; i < end; i++) {
            uint64_t x = h[i];
            for (int byte = 0; byte < 8; byte++)
                acc[byte] += spread[(x >> (8 * byte)) & 255];
        }
        for (int byte = 0; byte < 8; byte++)
            for (int j = 0; j < 8; j++)
                cnt[8 * byte + j] += (int64_t)((acc[byte] >> (8 * j)) & 255);
    }
}

static uint64_t majority_bits(const int64_t *cnt, int64_t total) {
    uint64_t fp = 0;
    for (int b = 0; b < 64; b++)
        if (2 * cnt[b] > total) fp |= 1ULL << b;
    return fp;
}

static uint64_t sign_bits_double(const double *acc) {
    uint64_t fp = 0;
    for (int b = 0; b < 64; b++)
        if (acc[b] > 0.0) fp |= 1ULL << b;
    return fp;
}

uint64_t ss_simhash(const uint64_t *hashes, const double *weights, size_t n) {
    if (weights == NULL) {
        /* bit is 1 iff more hashes have it set than clear */
        uint64_t spread[256];
        int64_t cnt[64] = {0};
        ss__make_spread(spread);
        count_bits(hashes, n, spread, cnt);
        return majority_bits(cnt, (int64_t)n);
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

/* ---- tokenizing -------------------------------------------------------- */

static inline int is_word_byte(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || c >= 0x80;
}

/* Copies the tokens of src[0..len) lower-cased into s->buf, separated by
 * one space; token t spans buf[starts[t] .. ends[t]). The scratch holds room
 * for any document of the batch (at most len bytes, len / 2 + 1 tokens). */
int64_t ss__tokenize_bytes(ss__text_scratch *s, const uint8_t *src, size_t len) {
    uint8_t *buf = s->buf;
    int64_t *starts = s->starts, *ends = s->ends;
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
    return (int64_t)ntok;
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

/* Compacts hashes[0..n) in place to its distinct values in first-seen order
 * (the order the reference implementation sums in), counting repeats. */
static size_t distinct_in_order(ss__text_scratch *s, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    uint64_t mask = cap - 1;
    memset(s->slots, 0, cap * sizeof(uint32_t));
    size_t nd = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = s->hashes[i];
        size_t pos = (size_t)((h ^ (h >> 29)) & mask);
        for (;;) {
            uint32_t slot = s->slots[pos];
            if (slot == 0) {
                s->hashes[nd] = h;
                s->counts[nd] = 1;
                s->slots[pos] = (uint32_t)(++nd);
                break;
            }
            if (s->hashes[slot - 1] == h) {
                s->counts[slot - 1]++;
                break;
            }
            pos = (pos + 1) & mask;
        }
    }
    return nd;
}

int ss_features(const uint8_t *text, const int64_t *offsets, size_t ndocs,
                int ngram, uint32_t seed, uint64_t *out_hashes,
                int64_t *out_offsets) {
    ss__text_scratch s;
    if (ngram < 1) return SS_EINVAL;
    int rc = ss__text_scratch_alloc(&s, offsets, ndocs);
    if (rc != SS_OK) return rc;
    int64_t pos = 0;
    out_offsets[0] = 0;
    for (size_t d = 0; d < ndocs; d++) {
        const uint8_t *src = text + offsets[d];
        size_t len = (size_t)(offsets[d + 1] - offsets[d]);
        size_t ntok = (size_t)ss__tokenize_bytes(&s, src, len);
        pos += (int64_t)shingle_hashes(s.buf, s.starts, s.ends, ntok, ngram,
                                       seed, out_hashes + pos);
        out_offsets[d + 1] = pos;
    }
    ss__text_scratch_free(&s);
    return SS_OK;
}

/* Fingerprint of distinct hashes with their counts under one weighting. */
static uint64_t weighted_fingerprint(const uint64_t *h, const int64_t *c,
                                     size_t nd, int weighting,
                                     const uint64_t *spread) {
    int64_t cnt[64] = {0};
    if (weighting == 0) {
        count_bits(h, nd, spread, cnt);
        return majority_bits(cnt, (int64_t)nd);
    }
    if (weighting == 1) {
        /* vote_b = 2 * (sum of counts with bit b set) - total; most counts are
         * 1, so count those in bulk and add the repeated ones one by one */
        int64_t total = 0;
        size_t run = 0;
        for (size_t i = 0; i < nd; i++) {
            total += c[i];
            if (c[i] != 1) {
                count_bits(h + i - run, run, spread, cnt);
                run = 0;
                for (int b = 0; b < 64; b++)
                    if ((h[i] >> b) & 1) cnt[b] += c[i];
            } else {
                run++;
            }
        }
        count_bits(h + nd - run, run, spread, cnt);
        return majority_bits(cnt, total);
    }
    double acc[64] = {0.0};
    for (size_t i = 0; i < nd; i++) {
        double w = 1.0 + log((double)c[i]);
        for (int b = 0; b < 64; b++) acc[b] += ((h[i] >> b) & 1) ? w : -w;
    }
    return sign_bits_double(acc);
}

/* Whether src[0..len) is all ASCII, eight bytes at a time. */
static int all_ascii(const uint8_t *src, size_t len) {
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, src + i, 8);
        if (w & 0x8080808080808080ULL) return 0;
    }
    for (; i < len; i++)
        if (src[i] & 0x80) return 0;
    return 1;
}

int ss__text_fingerprint(ss__text_scratch *s, const uint8_t *src, size_t len,
                         int ngram, uint32_t seed, int weighting, int unicode,
                         uint64_t *out_fp, size_t *out_ndistinct) {
    int64_t ntok = unicode && !all_ascii(src, len)
                       ? ss__tokenize_unicode(s, src, len)
                       : ss__tokenize_bytes(s, src, len);
    if (ntok < 0) return SS_ENOMEM;
    size_t nf = shingle_hashes(s->buf, s->starts, s->ends, (size_t)ntok, ngram,
                               seed, s->hashes);
    size_t nd = distinct_in_order(s, nf);
    *out_ndistinct = nd;
    *out_fp = weighted_fingerprint(s->hashes, s->counts, nd, weighting, s->spread);
    return SS_OK;
}

static int fingerprint_texts(const uint8_t *text, const int64_t *offsets,
                             size_t ndocs, int ngram, uint32_t seed,
                             int weighting, int unicode, uint64_t *out,
                             int64_t *out_nfeatures) {
    ss__text_scratch s;
    int rc = 0;
    if (ngram < 1 || weighting < 0 || weighting > 2) return SS_EINVAL;
    if ((rc = ss__text_scratch_alloc(&s, offsets, ndocs)) != SS_OK) return rc;
    for (size_t d = 0; d < ndocs && rc == 0; d++) {
        size_t nd = 0;
        rc = ss__text_fingerprint(&s, text + offsets[d],
                                  (size_t)(offsets[d + 1] - offsets[d]), ngram,
                                  seed, weighting, unicode, out + d, &nd);
        out_nfeatures[d] = (int64_t)nd;
    }
    ss__text_scratch_free(&s);
    return rc;
}

int ss_fingerprint_texts(const uint8_t *text, const int64_t *offsets,
                         size_t ndocs, int ngram, uint32_t seed,
                         int weighting, uint64_t *out,
                         int64_t *out_nfeatures) {
    return fingerprint_texts(text, offsets, ndocs, ngram, seed, weighting, 0,
                             out, out_nfeatures);
}

int ss_fingerprint_utf8(const uint8_t *text, const int64_t *offsets,
                        size_t ndocs, int ngram, uint32_t seed, int weighting,
                        uint64_t *out, int64_t *out_nfeatures) {
    return fingerprint_texts(text, offsets, ndocs, ngram, seed, weighting, 1,
                             out, out_nfeatures);
}
