/* Similarity signatures: MinHash bins -> odd sketch + LSH band keys.
 *
 * One-permutation hashing puts each distinct feature hash in one of K bins
 * and keeps the bin's smallest value; optimal densification (Shrivastava,
 * ICML 2017) gives each empty bin the value of a non-empty bin found by a
 * per-bin hash sequence, so every bin of two documents agrees with
 * probability equal to their Jaccard similarity. The K (bin, value) pairs are
 * folded into an odd sketch (Mitzenmacher, Pagh, Pham 2014): the XOR of two
 * sketches is the sketch of the symmetric difference, whose popcount
 * estimates its size. Band keys hash groups of rows band bins for LSH
 * candidate lookup. simstore/text/reference.py spells out the same scheme.
 *
 * A short document fills few of the K bins, and the per-bin sequences then
 * miss for most empty bins: finding that out costs 32 hashes each (40,000 a
 * document at K = 1280). The sequences depend only on the seed and the number
 * of bins, so a densify table (ss_densify_table, built once per shape by the
 * caller) inverts them: for each bin j, the (i, a) whose a-th try is j. A
 * sparse document then walks only the lists of its occupied bins.
 */
#include <stdlib.h>
#include <string.h>

#include "_internal.h"

#define BIN_EMPTY ((uint64_t)1 << 32) /* above every 32-bit bin value */
#define DENSIFY_ATTEMPTS 32
#define MAX_BINS 8192 /* 2 * the largest sketch_bits; bin indices fit 16 bits */
#define TABLE_HEAD 2  /* a densify table starts with its nbins and seed */
#define FALLBACK ((uint32_t)(DENSIFY_ATTEMPTS + 1) << 16) /* after every try */
/* A document with at most 1 / SPARSE_SHARE of its bins occupied densifies
 * through the table (32 table entries per occupied bin); a denser one by
 * hashing its empty bins' tries (few each). Measured: the two cost about the
 * same at a fifth (default shape). */
#define SPARSE_SHARE 5

#define SALT_SKETCH 0x6f64642d736b6574ULL  /* "odd-sket" */
#define SALT_BANDS 0x6c73682d62616e64ULL   /* "lsh-band" */
#define SALT_DENSIFY 0x64656e7365000000ULL /* "dense" */
#define SALT_ODD 0x6f64642d666f6c64ULL     /* "odd-fold" */

typedef struct {
    uint32_t seed;
    size_t sketch_bits, bands, rows;
    size_t nsketch, nband; /* bins: K = 2 * sketch_bits, L = bands * rows */
    uint64_t salt_s, salt_b, salt_d, salt_o;
    const uint32_t *stable, *btable; /* densify tables of nsketch, nband bins */
    uint64_t *sbins, *bbins;    /* raw bins, BIN_EMPTY where no hash fell */
    uint64_t *socc, *bocc;      /* their occupancy, one bit a bin */
    uint32_t *sdense, *bdense;  /* densified bins */
    uint32_t *pend, *last;      /* densify scratch, max(nsketch, nband) each */
    uint8_t *flips;             /* odd sketch scratch, one byte per bit */
    uint8_t keybuf[4 * 32];     /* one band's rows, little-endian */
} sig_state;

static int shape_ok(int sketch_bits, int bands, int rows) {
    return sketch_bits >= 64 && sketch_bits <= 4096 && sketch_bits % 64 == 0 &&
           bands >= 1 && bands <= 64 && rows >= 1 && rows <= 32 &&
           bands * rows <= 1024;
}

static size_t occ_words(size_t nbins) { return (nbins + 63) / 64; }

static void sig_free(sig_state *g) {
    free(g->sbins); free(g->bbins); free(g->socc); free(g->bocc);
    free(g->sdense); free(g->bdense);
    free(g->pend); free(g->last); free(g->flips);
}

/* Returns 0, or -1 out of memory (nothing to free then). */
static int sig_init(sig_state *g, uint32_t seed, int sketch_bits, int bands,
                    int rows, const uint32_t *stable, const uint32_t *btable) {
    memset(g, 0, sizeof(*g));
    g->seed = seed;
    g->sketch_bits = (size_t)sketch_bits;
    g->bands = (size_t)bands;
    g->rows = (size_t)rows;
    g->nsketch = 2 * g->sketch_bits;
    g->nband = g->bands * g->rows;
    g->salt_s = ss__fmix64(seed ^ SALT_SKETCH);
    g->salt_b = ss__fmix64(seed ^ SALT_BANDS);
    g->salt_d = ss__fmix64(seed ^ SALT_DENSIFY);
    g->salt_o = ss__fmix64(seed ^ SALT_ODD);
    g->stable = stable;
    g->btable = btable;
    g->sbins = malloc(g->nsketch * sizeof(uint64_t));
    g->bbins = malloc(g->nband * sizeof(uint64_t));
    g->socc = malloc(occ_words(g->nsketch) * sizeof(uint64_t));
    g->bocc = malloc(occ_words(g->nband) * sizeof(uint64_t));
    g->sdense = malloc(g->nsketch * sizeof(uint32_t));
    g->bdense = malloc(g->nband * sizeof(uint32_t));
    size_t most = g->nsketch > g->nband ? g->nsketch : g->nband;
    g->pend = malloc(most * sizeof(uint32_t));
    g->last = malloc(most * sizeof(uint32_t));
    g->flips = malloc(g->sketch_bits);
    if (!g->sbins || !g->bbins || !g->socc || !g->bocc || !g->sdense ||
        !g->bdense || !g->pend || !g->last || !g->flips) {
        sig_free(g);
        return SS_ENOMEM;
    }
    return SS_OK;
}

/* x (< 2**32) scaled to 0 .. n-1 by multiply-shift. */
static inline size_t scaled(uint64_t x, size_t n) {
    return (size_t)((x * (uint64_t)n) >> 32);
}

/* One-permutation MinHash of h[0..n) into the sketch and the band bins
 * (one pass, two independent hash chains per feature). */
static void fill_bins(const sig_state *g, const uint64_t *h, size_t n) {
    /* Locals, not g's fields: a store to a bin may alias them (the build
     * has -fno-strict-aliasing), which would reload them every iteration
     * and keep the resets from vectorizing. */
    uint64_t *sb = g->sbins, *bb = g->bbins, *so = g->socc, *bo = g->bocc;
    const size_t ns = g->nsketch, nb = g->nband;
    const uint64_t salt_s = g->salt_s, salt_b = g->salt_b;
    for (size_t i = 0; i < ns; i++) sb[i] = BIN_EMPTY;
    for (size_t i = 0; i < nb; i++) bb[i] = BIN_EMPTY;
    memset(so, 0, occ_words(ns) * sizeof(uint64_t));
    memset(bo, 0, occ_words(nb) * sizeof(uint64_t));
    for (size_t i = 0; i < n; i++) {
        uint64_t x = ss__fmix64(h[i] ^ salt_s), y = ss__fmix64(h[i] ^ salt_b);
        size_t bx = scaled(x >> 32, ns), by = scaled(y >> 32, nb);
        uint64_t vx = x & 0xffffffffULL, vy = y & 0xffffffffULL;
        sb[bx] = vx < sb[bx] ? vx : sb[bx];
        bb[by] = vy < bb[by] ? vy : bb[by];
        so[bx / 64] |= (uint64_t)1 << (bx % 64);
        bo[by / 64] |= (uint64_t)1 << (by % 64);
    }
}

/* Bin index of empty bin i's a-th densification try. */
static inline size_t densify_try(uint64_t salt_d, uint64_t i, uint64_t a,
                                 size_t nbins) {
    return scaled(ss__fmix64(salt_d ^ ((i << 32) | a)) >> 32, nbins);
}

size_t ss_densify_table_words(size_t nbins) {
    if (nbins < 1 || nbins > MAX_BINS) return 0;
    return TABLE_HEAD + (nbins + 1) + nbins + DENSIFY_ATTEMPTS * nbins;
}

/* Layout after the head: start[nbins + 1] (bin j's list is
 * inv[start[j] .. start[j + 1])), after[nbins] (the bin after bin i's last
 * try, cyclically), then inv[32 * nbins] of (i << 6 | a). */
int ss_densify_table(uint32_t seed, size_t nbins, uint32_t *out) {
    if (nbins < 1 || nbins > MAX_BINS) return SS_EINVAL;
    uint64_t salt_d = ss__fmix64(seed ^ SALT_DENSIFY);
    uint32_t *start = out + TABLE_HEAD, *after = start + nbins + 1;
    uint32_t *inv = after + nbins;
    out[0] = (uint32_t)nbins;
    out[1] = seed;
    memset(start, 0, (nbins + 1) * sizeof(uint32_t));
    for (uint64_t i = 0; i < nbins; i++)
        for (uint64_t a = 1; a <= DENSIFY_ATTEMPTS; a++)
            start[densify_try(salt_d, i, a, nbins) + 1]++;
    for (size_t j = 1; j <= nbins; j++) start[j] += start[j - 1];
    memcpy(after, start, nbins * sizeof(uint32_t)); /* fill cursors, for now */
    for (uint64_t i = 0; i < nbins; i++)
        for (uint64_t a = 1; a <= DENSIFY_ATTEMPTS; a++)
            inv[after[densify_try(salt_d, i, a, nbins)]++] = (uint32_t)(i << 6 | a);
    for (uint64_t i = 0; i < nbins; i++) {
        size_t last = densify_try(salt_d, i, DENSIFY_ATTEMPTS, nbins);
        after[i] = (uint32_t)((last + 1) % nbins);
    }
    return SS_OK;
}

/* Whether table is the densify table of nbins bins and this seed. */
static int table_ok(const uint32_t *table, size_t nbins, uint32_t seed) {
    return table[0] == nbins && table[1] == seed;
}

/* Optimal densification, reading only the original occupancy: an empty bin
 * i takes the value of the first non-empty bin j among
 * scaled(fmix64(salt_d ^ (i << 32 | a)) >> 32) for a = 1..32, else of the
 * first non-empty bin after the last of those. Done in rounds, one attempt
 * for every still-empty bin per round, so the loops do not branch on
 * occupancy (which is random). pend/last are scratch of nbins entries. At
 * least one bin must be non-empty. */
static void densify_hashing(const uint64_t *bins, size_t nbins, uint64_t salt_d,
                            uint32_t *out, uint32_t *pend, uint32_t *last) {
    size_t np = 0;
    for (size_t i = 0; i < nbins; i++) {
        out[i] = (uint32_t)bins[i];
        pend[np] = (uint32_t)i;
        np += bins[i] == BIN_EMPTY;
    }
    for (uint64_t a = 1; a <= DENSIFY_ATTEMPTS && np; a++) {
        size_t still = 0;
        for (size_t k = 0; k < np; k++) {
            uint64_t i = pend[k];
            size_t j = densify_try(salt_d, i, a, nbins);
            out[i] = (uint32_t)bins[j];  /* overwritten later if bins[j] is empty */
            pend[still] = (uint32_t)i;
            last[still] = (uint32_t)j;
            still += bins[j] == BIN_EMPTY;
        }
        np = still;
    }
    for (size_t k = 0; k < np; k++) {
        size_t j = last[k];
        do {
            j = j + 1 == nbins ? 0 : j + 1;
        } while (bins[j] == BIN_EMPTY);
        out[pend[k]] = (uint32_t)bins[j];
    }
}

/* The same densification through a densify table, for a sparse document.
 * pick[i] holds bin i's best (try << 16 | source bin) so far: first its
 * fallback, try 33, the first occupied bin from its after[] on (next[] holds,
 * for each bin, the first occupied one from it on, cyclically); then the
 * least over the occupied bins' lists; an occupied bin picks itself (try 0).
 * occ is the occupancy bitmap; pick/next are scratch of nbins. */
static void densify_table(const uint64_t *bins, const uint64_t *occ,
                          size_t nbins, const uint32_t *table, uint32_t *out,
                          uint32_t *pick, uint32_t *next) {
    const uint32_t *start = table + TABLE_HEAD, *after = start + nbins + 1;
    const uint32_t *inv = after + nbins;
    const size_t words = occ_words(nbins);
    size_t first = nbins, k = 0;
    for (size_t w = 0; w < words; w++) {
        for (uint64_t x = occ[w]; x; x &= x - 1) {
            uint32_t j = (uint32_t)(64 * w + (size_t)__builtin_ctzll(x));
            first = first < j ? first : j;
            while (k <= j) next[k++] = j;
        }
    }
    while (k < nbins) next[k++] = (uint32_t)first;
    for (size_t i = 0; i < nbins; i++) pick[i] = FALLBACK | next[after[i]];
    for (size_t w = 0; w < words; w++) {
        for (uint64_t x = occ[w]; x; x &= x - 1) {
            uint32_t j = (uint32_t)(64 * w + (size_t)__builtin_ctzll(x));
            for (uint32_t e = start[j]; e < start[j + 1]; e++) {
                uint32_t i = inv[e] >> 6, c = (inv[e] & 63) << 16 | j;
                pick[i] = c < pick[i] ? c : pick[i];
            }
            pick[j] = j;
        }
    }
    for (size_t i = 0; i < nbins; i++) out[i] = (uint32_t)bins[pick[i] & 0xffff];
}

/* Densification by whichever way costs less for this occupancy. */
static void densify(const uint64_t *bins, const uint64_t *occ, size_t nbins,
                    const sig_state *g, const uint32_t *table, uint32_t *out) {
    size_t occupied = 0;
    for (size_t w = 0; w < occ_words(nbins); w++)
        occupied += (size_t)__builtin_popcountll(occ[w]);
    if (SPARSE_SHARE * occupied <= nbins)
        densify_table(bins, occ, nbins, table, out, g->pend, g->last);
    else
        densify_hashing(bins, nbins, g->salt_d, out, g->pend, g->last);
}

/* Toggles one byte per bit position, then packs: XORs into a few words
 * would chain through memory on every update. flips holds bits bytes. */
static void odd_sketch(const uint32_t *dense, size_t nbins, uint64_t salt_o,
                       size_t bits, uint8_t *flips, uint64_t *out) {
    memset(flips, 0, bits);
    for (size_t i = 0; i < nbins; i++) {
        uint64_t pair = ((uint64_t)i << 32) | dense[i];
        flips[scaled(ss__fmix64(salt_o ^ pair) >> 32, bits)] ^= 1;
    }
    for (size_t w = 0; w < bits / 64; w++) {
        uint64_t word = 0;
        for (int k = 0; k < 64; k++) word |= (uint64_t)flips[64 * w + (size_t)k] << k;
        out[w] = word;
    }
}

static void band_keys(sig_state *g, uint64_t *out) {
    uint64_t h[2];
    for (size_t beta = 0; beta < g->bands; beta++) {
        const uint32_t *row = g->bdense + beta * g->rows;
        for (size_t r = 0; r < g->rows; r++)
            for (int k = 0; k < 4; k++)
                g->keybuf[4 * r + (size_t)k] = (uint8_t)(row[r] >> (8 * k));
        ss_murmur3_x64_128(g->keybuf, 4 * g->rows,
                           g->seed + 1u + (uint32_t)beta, h);
        out[beta] = h[0];
    }
}

/* Sketch words and band keys of the hash set h[0..n), n >= 1. */
static void signature_one(sig_state *g, const uint64_t *h, size_t n,
                          uint64_t *out_sketch, uint64_t *out_bands) {
    fill_bins(g, h, n);
    densify(g->sbins, g->socc, g->nsketch, g, g->stable, g->sdense);
    densify(g->bbins, g->bocc, g->nband, g, g->btable, g->bdense);
    odd_sketch(g->sdense, g->nsketch, g->salt_o, g->sketch_bits, g->flips,
               out_sketch);
    band_keys(g, out_bands);
}

int ss_signature_hashes(const uint64_t *hashes, const int64_t *offsets,
                        size_t ndocs, uint32_t seed, int sketch_bits,
                        int bands, int rows, const uint32_t *sketch_table,
                        const uint32_t *band_table, uint64_t *out_sketch,
                        uint64_t *out_bands) {
    sig_state g;
    if (!shape_ok(sketch_bits, bands, rows) ||
        !table_ok(sketch_table, 2 * (size_t)sketch_bits, seed) ||
        !table_ok(band_table, (size_t)bands * (size_t)rows, seed))
        return SS_EINVAL;
    for (size_t d = 0; d < ndocs; d++)
        if (offsets[d + 1] <= offsets[d] || offsets[d] < 0) return SS_EINVAL;
    if (sig_init(&g, seed, sketch_bits, bands, rows, sketch_table,
                 band_table) != 0)
        return SS_ENOMEM;
    size_t words = g.sketch_bits / 64;
    for (size_t d = 0; d < ndocs; d++)
        signature_one(&g, hashes + offsets[d],
                      (size_t)(offsets[d + 1] - offsets[d]),
                      out_sketch + d * words, out_bands + d * g.bands);
    sig_free(&g);
    return SS_OK;
}

/* Where signature_texts writes, one row per document (see ss_signature_texts). */
typedef struct {
    uint64_t *fp;
    uint64_t *sketch;
    uint64_t *bands;
    int64_t *nfeatures;
} sig_outputs;

static int signature_texts(const uint8_t *text, const int64_t *offsets,
                           size_t ndocs, int ngram, uint32_t seed,
                           int weighting, int unicode, int sketch_bits,
                           int bands, int rows, const uint32_t *sketch_table,
                           const uint32_t *band_table, const sig_outputs *out) {
    uint64_t *out_fp = out->fp, *out_sketch = out->sketch, *out_bands = out->bands;
    int64_t *out_nfeatures = out->nfeatures;
    ss__text_scratch s;
    sig_state g;
    int rc = 0;
    if (ngram < 1 || weighting < 0 || weighting > 2) return SS_EINVAL;
    if (!shape_ok(sketch_bits, bands, rows) ||
        !table_ok(sketch_table, 2 * (size_t)sketch_bits, seed) ||
        !table_ok(band_table, (size_t)bands * (size_t)rows, seed))
        return SS_EINVAL;
    for (size_t d = 0; d < ndocs; d++)
        if (offsets[d + 1] < offsets[d]) return SS_EINVAL;
    if ((rc = ss__text_scratch_alloc(&s, offsets, ndocs)) != SS_OK) return rc;
    if (sig_init(&g, seed, sketch_bits, bands, rows, sketch_table,
                 band_table) != 0) {
        ss__text_scratch_free(&s);
        return SS_ENOMEM;
    }
    size_t words = g.sketch_bits / 64;
    for (size_t d = 0; d < ndocs && rc == 0; d++) {
        size_t nd = 0;
        uint64_t *sk = out_sketch + d * words, *bk = out_bands + d * g.bands;
        rc = ss__text_fingerprint(&s, text + offsets[d],
                                  (size_t)(offsets[d + 1] - offsets[d]), ngram,
                                  seed, weighting, unicode, out_fp + d, &nd);
        out_nfeatures[d] = (int64_t)nd;
        if (nd) {
            signature_one(&g, s.hashes, nd, sk, bk);
        } else {
            memset(sk, 0, words * sizeof(uint64_t));
            memset(bk, 0, g.bands * sizeof(uint64_t));
        }
    }
    sig_free(&g);
    ss__text_scratch_free(&s);
    return rc;
}

int ss_signature_texts(const uint8_t *text, const int64_t *offsets,
                       size_t ndocs, int ngram, uint32_t seed, int weighting,
                       int sketch_bits, int bands, int rows,
                       const uint32_t *sketch_table, const uint32_t *band_table,
                       uint64_t *out_fp, uint64_t *out_sketch,
                       uint64_t *out_bands, int64_t *out_nfeatures) {
    sig_outputs out = {out_fp, out_sketch, out_bands, out_nfeatures};
    return signature_texts(text, offsets, ndocs, ngram, seed, weighting, 0,
                           sketch_bits, bands, rows, sketch_table, band_table, &out);
}

int ss_signature_utf8(const uint8_t *text, const int64_t *offsets,
                      size_t ndocs, int ngram, uint32_t seed, int weighting,
                      int sketch_bits, int bands, int rows,
                      const uint32_t *sketch_table, const uint32_t *band_table,
                      uint64_t *out_fp, uint64_t *out_sketch,
                      uint64_t *out_bands, int64_t *out_nfeatures) {
    sig_outputs out = {out_fp, out_sketch, out_bands, out_nfeatures};
    return signature_texts(text, offsets, ndocs, ngram, seed, weighting, 1,
                           sketch_bits, bands, rows, sketch_table, band_table, &out);
}

SS__CLONES
int ss_sketch_distance_one(const uint64_t *q, const uint64_t *sketches,
                           size_t n, int words, int32_t *out) {
    if (words < 1 || words > 64) return SS_EINVAL;
    size_t w = (size_t)words;
    for (size_t i = 0; i < n; i++) {
        const uint64_t *row = sketches + i * w;
        int32_t d = 0;
        for (size_t k = 0; k < w; k++) d += __builtin_popcountll(q[k] ^ row[k]);
        out[i] = d;
    }
    return SS_OK;
}

SS__CLONES
int ss_sketch_distance_pairwise(const uint64_t *a, const uint64_t *b,
                                size_t n, int words, int32_t *out) {
    if (words < 1 || words > 64) return SS_EINVAL;
    size_t w = (size_t)words;
    for (size_t i = 0; i < n * w; i += w) {
        int32_t d = 0;
        for (size_t k = 0; k < w; k++) d += __builtin_popcountll(a[i + k] ^ b[i + k]);
        out[i / w] = d;
    }
    return SS_OK;
}
