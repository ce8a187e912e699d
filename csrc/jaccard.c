/* Exact Jaccard similarity of shingle-hash sets.
 *
 * A document's set is its distinct 64-bit feature hashes (the shingles of the
 * fingerprint pipeline, csrc/simhash.c), sorted ascending, so that two sets
 * meet in one linear merge. ss_shingle_sets makes the sets of many texts in
 * one call; ss_jaccard_pairs measures many candidate pairs in one call and,
 * given a threshold, stops early on pairs that provably fall below it (the
 * size bound min/max >= J, and the misses budget of the merge).
 * ss_shingles_encode / ss_shingles_decode pack sets compactly for a store
 * that keeps them (Golomb-Rice coded gaps, see SETCODE below).
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
    if (ngram < 1) return SS_EINVAL;
    for (size_t d = 0; d < ndocs; d++)
        if (offsets[d + 1] < offsets[d]) return SS_EINVAL;
    if (ss__text_scratch_alloc(&s, offsets, ndocs) != 0) return SS_ENOMEM;
    size_t tmpcap = 0;
    uint64_t *tmp = NULL;
    size_t *count = malloc((((size_t)1 << BUCKET_BITS_MAX) + 1) * sizeof(size_t));
    int64_t pos = 0, rc = 0;
    if (count == NULL) rc = SS_ENOMEM;
    out_offsets[0] = 0;
    for (size_t d = 0; d < ndocs && rc == 0; d++) {
        size_t nd = 0;
        uint64_t fp;
        if (ss__text_fingerprint(&s, text + offsets[d],
                                 (size_t)(offsets[d + 1] - offsets[d]), ngram,
                                 seed, 0, unicode, &fp, &nd) != 0) {
            rc = SS_ENOMEM;
            break;
        }
        if (nd > tmpcap) {
            uint64_t *grown = realloc(tmp, nd * sizeof(uint64_t));
            if (grown == NULL) {
                rc = SS_ENOMEM;
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

/* What intersect answers once the intersection is too small to matter (a
 * count, not a status). */
enum { TOO_FEW = -1 };

/* |a & b| of two ascending sets, or TOO_FEW once more than budget values of a
 * are found missing from b. */
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
            if (++missed > budget) return TOO_FEW;
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
    if (!(threshold >= 0.0 && threshold <= 1.0)) return SS_EINVAL;
    for (size_t p = 0; p < npairs; p++)
        if (pi[p] < 0 || (size_t)pi[p] >= na || pj[p] < 0 || (size_t)pj[p] >= nb)
            return SS_EINVAL;
    for (size_t p = 0; p < npairs; p++) {
        int64_t lo_a = offa[pi[p]], hi_a = offa[pi[p] + 1];
        int64_t lo_b = offb[pj[p]], hi_b = offb[pj[p] + 1];
        if (hi_a < lo_a || hi_b < lo_b) return SS_EINVAL;
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
        if (common == TOO_FEW) {
            out[p] = -1.0;
            continue;
        }
        double j = (double)common / (double)(la + lb - (size_t)common);
        out[p] = j;
    }
    return 0;
}

/* --- SETCODE: one sorted set as bytes -----------------------------------
 *
 * byte 0: the codec version (SET_CODEC_VERSION); then n, the set's size, as a
 * LEB128 varint; then, when n > 0, one byte k (0..63), the Rice parameter,
 * and the bit stream (most significant bit of each byte first, the last byte
 * padded with zeros) of n gaps: g_0 = v_0, g_i = v_i - v_(i-1) - 1. A gap g is
 * q = g >> k ones, a zero and the low k bits of g; a gap with q >= ESCAPE_Q is
 * ESCAPE_Q ones and then all 64 bits of g (so no crafted set costs more than
 * ESCAPE_Q + 64 bits a value). Uniform 64-bit hashes have gaps of about
 * 2^64 / n, so this saves about log2(n) - 1.5 bits a value against 64. */
#define SET_CODEC_VERSION 1
#define ESCAPE_Q 40

typedef struct {
    uint8_t *out; /* NULL: only count */
    size_t pos;   /* bytes written */
    uint64_t acc; /* pending bits, the low `nacc` of them */
    int nacc;
} bitwriter;

static void put_bits(bitwriter *w, uint64_t v, int nb) { /* nb <= 32 */
    w->acc = (w->acc << nb) | (v & (((uint64_t)1 << nb) - 1));
    w->nacc += nb;
    while (w->nacc >= 8) {
        w->nacc -= 8;
        if (w->out) w->out[w->pos] = (uint8_t)(w->acc >> w->nacc);
        w->pos++;
    }
}

static void put_wide(bitwriter *w, uint64_t v, int nb) { /* nb <= 64 */
    if (nb > 32) {
        put_bits(w, v >> 32, nb - 32);
        put_bits(w, v, 32);
    } else if (nb > 0) {
        put_bits(w, v, nb);
    }
}

static uint64_t gap_at(const uint64_t *a, size_t i) {
    return i == 0 ? a[0] : a[i] - a[i - 1] - 1;
}

/* Bits of the gaps of a[0..n) coded with parameter k. */
static uint64_t coded_bits(const uint64_t *a, size_t n, int k) {
    uint64_t bits = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t q = gap_at(a, i) >> k;
        bits += q >= ESCAPE_Q ? ESCAPE_Q + 64 : q + 1 + (uint64_t)k;
    }
    return bits;
}

/* The Rice parameter of the gaps of a[0..n) (n > 0): near log2 of the mean gap,
 * the cheapest of its neighbours; *bits gets the gaps' bits with it. */
static int choose_k(const uint64_t *a, size_t n, uint64_t *bits) {
    uint64_t mean = a[n - 1] / n;
    int k0 = 0;
    while (k0 < 63 && (mean >> (k0 + 1)) != 0) k0++;
    int best = k0;
    uint64_t best_bits = coded_bits(a, n, k0);
    for (int k = k0 - 2; k <= k0 + 1; k++) {
        if (k < 0 || k > 63 || k == k0) continue;
        uint64_t b = coded_bits(a, n, k);
        if (b < best_bits) {
            best_bits = b;
            best = k;
        }
    }
    *bits = best_bits;
    return best;
}

/* The bytes of the header of a set of n values coded with k, written to out
 * when out is not NULL (a whole number of bytes: the gaps start a byte). */
static size_t put_header(uint8_t *out, uint64_t n, int k) {
    bitwriter w = {out, 0, 0, 0};
    put_bits(&w, SET_CODEC_VERSION, 8);
    uint64_t m = n;
    do {
        uint8_t b = (uint8_t)(m & 127);
        m >>= 7;
        put_bits(&w, b | (m ? 128 : 0), 8);
    } while (m);
    if (n) put_bits(&w, (uint64_t)k, 8);
    return w.pos;
}

/* The gaps of the next m values a[0..m) of a set, `done` of whose values,
 * the last of them `last`, are written. */
static void put_gaps(bitwriter *w, const uint64_t *a, size_t m, int k,
                     uint64_t done, uint64_t last) {
    for (size_t i = 0; i < m; i++) {
        uint64_t g = done + i == 0 ? a[0] : a[i] - (i ? a[i - 1] : last) - 1;
        uint64_t q = g >> k;
        if (q >= ESCAPE_Q) {
            put_wide(w, ~(uint64_t)0, ESCAPE_Q);
            put_wide(w, g, 64);
            continue;
        }
        put_wide(w, ((uint64_t)1 << (q + 1)) - 2, (int)q + 1); /* q ones, a zero */
        put_wide(w, g, k);
    }
}

/* Bytes of one set's code, written to out when out is not NULL. */
static size_t encode_set(const uint64_t *a, size_t n, uint8_t *out) {
    uint64_t bits = 0;
    int k = n ? choose_k(a, n, &bits) : 0;
    size_t head = put_header(out, n, k);
    if (out == NULL || n == 0) return head + (size_t)((bits + 7) / 8);
    bitwriter w = {out, head, 0, 0};
    put_gaps(&w, a, n, k, 0, 0);
    if (w.nacc) put_bits(&w, 0, 8 - w.nacc);
    return w.pos;
}

int64_t ss_setcode_begin(const uint64_t *a, size_t n, ss_setcode_writer *w,
                         uint8_t *head) {
    for (size_t i = 1; i < n; i++)
        if (a[i] <= a[i - 1]) return SS_EINVAL;
    uint64_t bits = 0;
    int k = n ? choose_k(a, n, &bits) : 0;
    w->pos = put_header(head, n, k);
    w->acc = 0;
    w->nacc = 0;
    w->k = k;
    w->done = 0;
    w->last = 0;
    return (int64_t)(w->pos + (bits + 7) / 8);
}

int64_t ss_setcode_put(ss_setcode_writer *w, const uint64_t *a, size_t m,
                       uint8_t *out, int end) {
    bitwriter bw = {out, (size_t)w->pos, w->acc, w->nacc};
    put_gaps(&bw, a, m, w->k, w->done, w->last);
    if (end && bw.nacc) put_bits(&bw, 0, 8 - bw.nacc);
    w->done += m;
    if (m) w->last = a[m - 1];
    w->pos = bw.pos;
    w->acc = bw.acc;
    w->nacc = bw.nacc;
    return (int64_t)bw.pos;
}

int64_t ss_shingles_encode(const uint64_t *hashes, const int64_t *offsets,
                           size_t nsets, uint8_t *out, size_t cap,
                           int64_t *out_offsets) {
    int64_t pos = 0;
    out_offsets[0] = 0;
    for (size_t d = 0; d < nsets; d++) {
        if (offsets[d + 1] < offsets[d]) return SS_EINVAL;
        const uint64_t *a = hashes + offsets[d];
        size_t n = (size_t)(offsets[d + 1] - offsets[d]);
        for (size_t i = 1; i < n; i++)
            if (a[i] <= a[i - 1]) return SS_EINVAL;
        size_t len = encode_set(a, n, NULL);
        if ((size_t)pos + len <= cap) encode_set(a, n, out + pos);
        pos += (int64_t)len;
        out_offsets[d + 1] = pos;
    }
    return pos;
}

typedef struct {
    const uint8_t *in;
    size_t pos, len; /* next byte, bytes */
    uint64_t acc;    /* unread bits, the low `nacc` of them */
    int nacc;
} bitreader;

/* The next nb <= 32 bits; SS_EBADCODE past the end. */
static int get_bits(bitreader *r, int nb, uint64_t *v) {
    while (r->nacc < nb) {
        if (r->pos >= r->len) return SS_EBADCODE;
        r->acc = (r->acc << 8) | r->in[r->pos++];
        r->nacc += 8;
    }
    r->nacc -= nb;
    *v = (r->acc >> r->nacc) & (((uint64_t)1 << nb) - 1);
    return 0;
}

static int get_wide(bitreader *r, int nb, uint64_t *v) { /* nb <= 64 */
    uint64_t hi = 0, lo = 0;
    if (nb > 32) {
        if (get_bits(r, nb - 32, &hi) || get_bits(r, 32, &lo)) return SS_EBADCODE;
        *v = (hi << 32) | lo;
        return 0;
    }
    if (nb == 0) {
        *v = 0;
        return 0;
    }
    return get_bits(r, nb, v);
}

/* A code's version byte and size n from in[0..len): the bytes they take
 * (*body), SS_EBADCODE if the version is unknown or the varint runs off the
 * end or cannot fit. */
static int size_of(const uint8_t *in, size_t len, uint64_t *n, size_t *body) {
    if (len < 2 || in[0] != SET_CODEC_VERSION) return SS_EBADCODE;
    uint64_t m = 0;
    size_t p = 1;
    for (int shift = 0;; shift += 7) {
        if (p >= len || shift > 63) return SS_EBADCODE;
        uint8_t b = in[p++];
        m |= (uint64_t)(b & 127) << shift;
        if (!(b & 128)) break;
    }
    *n = m;
    *body = p;
    return 0;
}

/* A whole code's header: its size n and where its bit stream starts (*body);
 * SS_EBADCODE if size_of refuses it, the Rice parameter is out of range or
 * the code is too short for n gaps. */
static int read_header(const uint8_t *in, size_t len, uint64_t *n, size_t *body) {
    uint64_t m;
    size_t p;
    if (size_of(in, len, &m, &p)) return SS_EBADCODE;
    if (m == 0) {
        if (p != len) return SS_EBADCODE;
    } else if (p >= len || in[p] > 63 || (len - p - 1) * 8 < m) {
        return SS_EBADCODE; /* each gap takes at least one bit */
    }
    *n = m;
    *body = p;
    return 0;
}

enum { MORE = 1 }; /* what read_gap answers when the bytes end inside a gap */

/* The next gap of a code with Rice parameter k: 0 (in *g), MORE when the bytes
 * end first (br then stands anywhere inside it), SS_EBADCODE (too long for k). */
static inline int read_gap(bitreader *br, int k, uint64_t *g) {
    uint64_t q = 0, bit = 0;
    while (q < ESCAPE_Q) {
        if (get_bits(br, 1, &bit)) return MORE;
        if (!bit) break;
        q++;
    }
    if (q >= ESCAPE_Q) return get_wide(br, 64, g) ? MORE : 0;
    uint64_t low = 0;
    if (q > (~(uint64_t)0 >> k)) return SS_EBADCODE;
    if (get_wide(br, k, &low)) return MORE;
    *g = (q << k) | low;
    return 0;
}

/* The value a gap g gives after `read` values, the last prev: 0, or SS_EBADCODE
 * when it passes 2^64 - 1. */
static inline int add_gap(uint64_t read, uint64_t prev, uint64_t *g) {
    if (read == 0) return 0;
    if (*g >= ~(uint64_t)0 - prev) return SS_EBADCODE; /* prev + g + 1 overflows */
    *g += prev + 1;
    return 0;
}

/* The next value of r, read from the bits it holds and in[*pos..len): 0 (in
 * r->value; *pos moves on), MORE when in ends first (nothing is taken), or
 * SS_EBADCODE. */
static int next_value(ss_setcode_reader *r, const uint8_t *in, size_t len,
                      size_t *pos) {
    bitreader br = {in, *pos, len, r->acc, r->nacc};
    uint64_t g = 0;
    int rc = read_gap(&br, r->k, &g);
    if (rc) return rc;
    if (add_gap(r->read, r->value, &g)) return SS_EBADCODE;
    r->value = g;
    r->read++;
    r->acc = br.acc;
    r->nacc = br.nacc;
    *pos = br.pos;
    return 0;
}

/* Decodes one code into out[0..n); SS_EBADCODE if it is malformed. */
static int decode_set(const uint8_t *in, size_t len, size_t body, uint64_t n,
                      uint64_t *out) {
    if (n == 0) return 0;
    int k = in[body];
    bitreader br = {in, body + 1, len, 0, 0};
    uint64_t prev = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t g = 0;
        if (read_gap(&br, k, &g) || add_gap(i, prev, &g)) return SS_EBADCODE;
        out[i] = prev = g;
    }
    ss_setcode_reader r = {.n = n, .read = n, .acc = br.acc, .nacc = br.nacc};
    return ss_setcode_done(&r, len - br.pos);
}

int64_t ss_setcode_open(ss_setcode_reader *r, const uint8_t *in, size_t len) {
    uint64_t n;
    size_t p;
    if (size_of(in, len, &n, &p)) return SS_EBADCODE;
    memset(r, 0, sizeof *r);
    r->n = n;
    if (n == 0) return (int64_t)p;
    if (p >= len || in[p] > 63) return SS_EBADCODE;
    r->k = in[p];
    return (int64_t)p + 1;
}

int ss_setcode_common(ss_setcode_reader *a, const uint8_t *ain, size_t alen,
                      size_t *apos, ss_setcode_reader *b, const uint8_t *bin,
                      size_t blen, size_t *bpos, uint64_t *common) {
    for (;;) {
        if (!a->held) {
            if (a->read == a->n) return 0;
            int rc = next_value(a, ain, alen, apos);
            if (rc) return rc == MORE ? 1 : rc;
            a->held = 1;
        }
        if (!b->held) {
            if (b->read == b->n) return 0;
            int rc = next_value(b, bin, blen, bpos);
            if (rc) return rc == MORE ? 2 : rc;
            b->held = 1;
        }
        if (a->value == b->value) {
            ++*common;
            a->held = b->held = 0;
        } else if (a->value < b->value) {
            a->held = 0;
        } else {
            b->held = 0;
        }
    }
}

int ss_setcode_skip(ss_setcode_reader *r, const uint8_t *in, size_t len,
                    size_t *pos) {
    while (r->read < r->n) {
        int rc = next_value(r, in, len, pos);
        if (rc) return rc == MORE ? 1 : rc;
    }
    r->held = 0;
    return 0;
}

int ss_setcode_done(const ss_setcode_reader *r, size_t left) {
    /* only zero padding may follow, within the last byte */
    if (r->read != r->n || left || (r->acc & (((uint64_t)1 << r->nacc) - 1)) != 0)
        return SS_EBADCODE;
    return SS_OK;
}

int64_t ss_shingles_decode(const uint8_t *codes, const int64_t *offsets,
                           size_t ncodes, uint64_t *out, size_t cap,
                           int64_t *out_offsets, int64_t *bad) {
    uint64_t total = 0;
    *bad = -1;
    out_offsets[0] = 0;
    for (size_t d = 0; d < ncodes; d++) {
        uint64_t n;
        size_t body;
        if (offsets[d + 1] < offsets[d]) return SS_EINVAL;
        if (read_header(codes + offsets[d], (size_t)(offsets[d + 1] - offsets[d]), &n,
                        &body) != 0) {
            *bad = (int64_t)d;
            return SS_EBADCODE;
        }
        total += n;
        out_offsets[d + 1] = (int64_t)total;
    }
    if (total > cap) return (int64_t)total;
    for (size_t d = 0; d < ncodes; d++) {
        uint64_t n = 0;
        size_t body = 0, len = (size_t)(offsets[d + 1] - offsets[d]);
        const uint8_t *in = codes + offsets[d];
        read_header(in, len, &n, &body);
        if (decode_set(in, len, body, n, out + out_offsets[d]) != 0) {
            *bad = (int64_t)d;
            return SS_EBADCODE;
        }
    }
    return (int64_t)total;
}
