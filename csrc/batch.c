/* Batch all-pairs near-duplicate search over arrays of fingerprints.
 *
 * Method (pigeonhole, applied recursively). Split the bits that still vary
 * into k+1 blocks: two fingerprints within k agree exactly on at least one
 * block. One pass per block groups the fingerprints by that block; a pair is
 * reported only from the first block it agrees on (a cheap mask test), so it
 * comes out once. A group too large to compare all-pairs is split the same
 * way on the bits that still vary inside it (a new "level"), so crowded
 * groups cost about their output, not their square. Pairs must satisfy the
 * condition of every level on the way down; emission checks them all.
 *
 * The top level of pass p buckets all fingerprints by (up to 16 bits of)
 * block p with one counting-sort scatter: 12 bytes per fingerprint of scratch.
 * Inputs should be distinct: a search that meets two identical fingerprints
 * stops and returns SS_IDENTICAL (copies are then grouped by ss_dedupe).
 */
#include <stdlib.h>
#include <string.h>

#include "_internal.h"

#define SS_MAX_DEPTH 64
/* Groups up to SS_TINY are compared all-pairs at once; up to SS_SMALL after
 * splitting on the header bits they must share (tuned on 1M..10M random). */
#define SS_TINY 12
#define SS_SMALL 192

typedef struct {
    uint64_t head;                   /* a reported pair agrees on this block */
    int nprev;
    uint64_t prev[64];               /* ... and on none of these earlier ones */
} ss_level;

typedef struct {
    int k;
    int depth;
    ss_level lv[SS_MAX_DEPTH];
    uint64_t *sfp;                   /* radix-sort scratch */
    uint32_t *six;
    size_t scap;
    ss_pairs *out;
} ss_ctx;

int ss_batch_brute_(ss_ctx *c, const uint64_t *fp, const uint32_t *ix,
                    size_t g, size_t first, size_t step);

void ss_pairs_free(ss_pairs *p) {
    free(p->i);
    free(p->j);
    free(p->d);
    p->i = p->j = NULL;
    p->d = NULL;
    p->n = p->cap = 0;
}

static int emit(ss_pairs *o, uint32_t a, uint32_t b, int d) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 1024;
        void *p;
        if (cap > SIZE_MAX / sizeof(int64_t)) return SS_ENOMEM;
        if (!(p = realloc(o->i, cap * sizeof(int64_t)))) return SS_ENOMEM;
        o->i = p;
        if (!(p = realloc(o->j, cap * sizeof(int64_t)))) return SS_ENOMEM;
        o->j = p;
        if (!(p = realloc(o->d, cap))) return SS_ENOMEM;
        o->d = p;
        o->cap = cap;
    }
    if (a > b) { uint32_t t = a; a = b; b = t; }
    o->i[o->n] = a;
    o->j[o->n] = b;
    o->d[o->n] = (uint8_t)d;
    o->n++;
    return 0;
}

/* Does a pair with XOR x meet the condition of every level? */
static inline int accepted(const ss_ctx *c, uint64_t x) {
    for (int L = 0; L < c->depth; L++) {
        const ss_level *l = &c->lv[L];
        if (x & l->head) return 0;
        for (int p = 0; p < l->nprev; p++)
            if (!(x & l->prev[p])) return 0;
    }
    return 1;
}

/* Every row a = first, first + step, ... of fp[0..g) against each later row:
 * pairs within k that meet every level's condition (none at depth 0) are
 * emitted as (ix[a], ix[b]), or as row numbers when ix is NULL. Both the
 * small groups of the search and ss_batch_brute's whole array come here; the
 * inner loop does only the popcount and the compare, the rest is per hit.
 * (extern only so it can carry target_clones) */
SS__CLONES
int ss_batch_brute_(ss_ctx *c, const uint64_t *fp, const uint32_t *ix,
                    size_t g, size_t first, size_t step) {
    const int k = c->k;
    for (size_t a = first; a + 1 < g; a += step) {
        const uint64_t fa = fp[a];
        for (size_t b = a + 1; b < g; b++) {
            uint64_t x = fa ^ fp[b];
            int d = __builtin_popcountll(x);
            if (d > k) continue;
            if (!x) return SS_IDENTICAL;
            if (!accepted(c, x)) continue;
            uint32_t ia = ix ? ix[a] : (uint32_t)a, ib = ix ? ix[b] : (uint32_t)b;
            if (emit(c->out, ia, ib, d)) return SS_ENOMEM;
        }
    }
    return 0;
}

/* Split the set bits of v (popcount >= nb) into nb blocks of near-equal size,
 * in bit order. */
static void split_bits(uint64_t v, int nb, uint64_t *blk) {
    int w = __builtin_popcountll(v), t = 0;
    for (int b = 0; b < nb; b++) blk[b] = 0;
    while (v) {
        uint64_t bit = v & (~v + 1);
        blk[(int)((long)t * nb / w)] |= bit;
        v ^= bit;
        t++;
    }
}

/* One stable radix pass: move (a, ai) into (b, bi) by digit (a >> sh) & dm,
 * given the counts of digits 0..dm (overwritten; dm is 2**bits - 1 or a
 * sub-mask of it). */
static void scatter(const uint64_t *a, const uint32_t *ai, uint64_t *b,
                    uint32_t *bi, size_t g, int sh, uint64_t dm,
                    size_t *count) {
    size_t s = 0;
    for (uint64_t d = 0; d <= dm; d++) {
        size_t t = count[d];
        count[d] = s;
        s += t;
    }
    for (size_t i = 0; i < g; i++) {
        size_t r = count[(a[i] >> sh) & dm]++;
        b[r] = a[i];
        bi[r] = ai[i];
    }
}

/* Stable LSD radix sort of a group by (fp & m), 8 bits a digit. */
static int sort_by_mask(ss_ctx *c, uint64_t *fp, uint32_t *ix, size_t g,
                        uint64_t m) {
    if (g <= 32) {   /* insertion sort: cheaper than clearing histograms */
        for (size_t i = 1; i < g; i++) {
            uint64_t f = fp[i], key = f & m;
            uint32_t x = ix[i];
            size_t j = i;
            for (; j > 0 && (fp[j - 1] & m) > key; j--) {
                fp[j] = fp[j - 1];
                ix[j] = ix[j - 1];
            }
            fp[j] = f;
            ix[j] = x;
        }
        return 0;
    }
    if (g > c->scap) {
        size_t cap = g > 2 * c->scap ? g : 2 * c->scap;
        void *p;
        if (!(p = realloc(c->sfp, cap * sizeof(uint64_t)))) return SS_ENOMEM;
        c->sfp = p;
        if (!(p = realloc(c->six, cap * sizeof(uint32_t)))) return SS_ENOMEM;
        c->six = p;
        c->scap = cap;
    }
    uint64_t *a = fp, *b = c->sfp;
    uint32_t *ai = ix, *bi = c->six;
    size_t count[256];
    for (int sh = __builtin_ctzll(m); sh < 64; sh += 8) {
        uint64_t dm = (m >> sh) & 0xff;
        if (!dm) continue;
        memset(count, 0, sizeof count);
        for (size_t i = 0; i < g; i++) count[(a[i] >> sh) & dm]++;
        if (count[(a[0] >> sh) & dm] == g) continue;
        scatter(a, ai, b, bi, g, sh, dm, count);
        uint64_t *t = a; a = b; b = t;
        uint32_t *ti = ai; ai = bi; bi = ti;
    }
    if (a != fp) {
        memcpy(fp, a, g * sizeof(uint64_t));
        memcpy(ix, ai, g * sizeof(uint32_t));
    }
    return 0;
}

static int node(ss_ctx *c, uint64_t *fp, uint32_t *ix, size_t g);

/* Is a pigeonhole split of w varying bits worth it? Each of the k+1 passes
 * must shrink groups enough to beat comparing all pairs once: blocks of b
 * bits cut the pairs per pass about 2**b times, so want 2**b >= 2(k+1).
 * (Fails for k >= 12 even at w = 64: such searches compare all pairs.) */
static int worth_splitting(int w, int k) {
    int b = w / (k + 1);
    return b >= 16 || (1 << b) >= 2 * (k + 1);
}

/* Sort a group by (fp & m) and search each run of equal values. */
static int runs(ss_ctx *c, uint64_t *fp, uint32_t *ix, size_t g, uint64_t m) {
    if (sort_by_mask(c, fp, ix, g, m)) return SS_ENOMEM;
    size_t s = 0;
    while (s < g) {
        uint64_t key = fp[s] & m;
        size_t e = s + 1;
        while (e < g && (fp[e] & m) == key) e++;
        int rc = e - s > 1 ? node(c, fp + s, ix + s, e - s) : 0;
        if (rc) return rc;
        s = e;
    }
    return 0;
}

static int node(ss_ctx *c, uint64_t *fp, uint32_t *ix, size_t g) {
    if (g < 2) return 0;
    if (g <= SS_TINY || c->depth >= SS_MAX_DEPTH)
        return ss_batch_brute_(c, fp, ix, g, 0, 1);
    uint64_t v = 0, heads = 0;
    for (size_t i = 1; i < g; i++) v |= fp[i] ^ fp[0];
    if (!v) return SS_IDENTICAL;
    for (int L = 0; L < c->depth; L++) {
        heads |= c->lv[L].head;
        /* every pair agrees on an earlier block: reported elsewhere */
        for (int p = 0; p < c->lv[L].nprev; p++)
            if (!(c->lv[L].prev[p] & v)) return 0;
    }
    /* pairs reported here agree on every head: split on its varying bits */
    if (heads & v) return runs(c, fp, ix, g, heads & v);
    if (g <= SS_SMALL) return ss_batch_brute_(c, fp, ix, g, 0, 1);
    int w = __builtin_popcountll(v);
    if (w <= c->k || !worth_splitting(w, c->k))
        return ss_batch_brute_(c, fp, ix, g, 0, 1);
    uint64_t blk[SS_MAX_K + 1];
    split_bits(v, c->k + 1, blk);
    ss_level *l = &c->lv[c->depth++];
    l->nprev = 0;
    for (int j = 0; j <= c->k; j++) {
        l->head = blk[j];
        int rc = runs(c, fp, ix, g, blk[j]);
        if (rc) {
            c->depth--;
            return rc;
        }
        l->prev[l->nprev++] = blk[j];
    }
    c->depth--;
    return 0;
}

int ss_batch_brute(const uint64_t *fps, size_t n, int k, int part, int nparts,
                   ss_pairs *out) {
    if (k < 0 || k > 64 || nparts < 1 || part < 0 || part >= nparts ||
        (uint64_t)n > UINT32_MAX)
        return SS_EINVAL;
    ss_ctx c;
    memset(&c, 0, sizeof c);
    c.k = k;
    c.out = out;
    return ss_batch_brute_(&c, fps, NULL, n, (size_t)part, (size_t)nparts);
}

/* One pass over header combo `combo` with caller-owned buffers of n. */
static int one_pass(ss_ctx *c, const uint64_t *fps, size_t n, int nblocks,
                    const uint64_t *blk, uint64_t combo, uint64_t *fp,
                    uint32_t *ix, uint16_t *bk, size_t *start) {
    ss_level *l = &c->lv[0];
    c->depth = 1;
    int last = 63 - __builtin_clzll(combo);
    /* header blocks, gathered into one key (blocks are contiguous here) */
    int nh = 0, hb = 0, lo[64], wd[64];
    uint64_t msk[64];
    l->head = 0;
    l->nprev = 0;
    for (int b = 0; b < nblocks; b++) {
        if (combo >> b & 1) {
            l->head |= blk[b];
            lo[nh] = __builtin_ctzll(blk[b]);
            msk[nh] = blk[b] >> lo[nh];
            wd[nh] = __builtin_popcountll(blk[b]);
            hb += wd[nh];
            nh++;
        } else if (b < last) {
            l->prev[l->nprev++] = blk[b];
        }
    }
    /* bucket by the top (up to) 16 bits of the key in one scatter */
    int kb = hb < 16 ? hb : 16;
    uint64_t km = (1ULL << kb) - 1;
    size_t nb = (size_t)1 << kb;
    memset(start, 0, (nb + 1) * sizeof(size_t));
    for (size_t i = 0; i < n; i++) {
        uint64_t f = fps[i], key = 0;
        for (int h = 0; h < nh; h++) key = (key << wd[h]) | ((f >> lo[h]) & msk[h]);
        size_t q = (size_t)((key >> (hb - kb)) & km);
        bk[i] = (uint16_t)q;
        start[q + 1]++;
    }
    for (size_t b = 1; b <= nb; b++) start[b] += start[b - 1];
    for (size_t i = 0; i < n; i++) {
        size_t r = start[bk[i]]++;
        fp[r] = fps[i];
        ix[r] = (uint32_t)i;
    }
    /* start[b] is now the end of bucket b */
    for (size_t b = 0, s = 0; b < nb; s = start[b], b++) {
        int rc = node(c, fp + s, ix + s, start[b] - s);
        if (rc) return rc;
    }
    return 0;
}

int ss_batch_pass(const uint64_t *fps, size_t n, int k, int nblocks,
                  const uint64_t *combos, int ncombos, ss_pairs *out) {
    if (k < 0 || k > SS_MAX_K || nblocks <= k || nblocks > 64 ||
        (uint64_t)n > UINT32_MAX || ncombos < 0)
        return SS_EINVAL;
    for (int t = 0; t < ncombos; t++)
        if ((nblocks < 64 && combos[t] >> nblocks) ||
            __builtin_popcountll(combos[t]) != nblocks - k)
            return SS_EINVAL;
    if (n < 2 || ncombos == 0) return 0;
    ss_ctx c;
    memset(&c, 0, sizeof c);
    c.k = k;
    c.out = out;
    uint64_t blk[64];
    split_bits(~0ULL, nblocks, blk);
    uint64_t *fp = malloc(n * sizeof(uint64_t));
    uint32_t *ix = malloc(n * sizeof(uint32_t));
    uint16_t *bk = malloc(n * sizeof(uint16_t));
    size_t *start = malloc(((1 << 16) + 1) * sizeof(size_t));
    int rc = SS_ENOMEM;
    if (fp && ix && bk && start) {
        rc = SS_OK;
        for (int t = 0; t < ncombos && !rc; t++)
            rc = one_pass(&c, fps, n, nblocks, blk, combos[t], fp, ix, bk, start);
    }
    free(fp);
    free(ix);
    free(bk);
    free(start);
    free(c.sfp);
    free(c.six);
    return rc;
}

int ss_dedupe(const uint64_t *fps, size_t n, uint64_t *out_uniq,
              uint32_t *out_order, uint32_t *out_starts, size_t *out_nuniq) {
    if ((uint64_t)n > UINT32_MAX) return SS_EINVAL;
    *out_nuniq = 0;
    out_starts[0] = 0;
    if (n == 0) return 0;
    /* 11-bit digits: 6 passes over the data */
    size_t(*count)[2048] = calloc(6, sizeof *count);
    uint64_t *b = malloc(n * sizeof(uint64_t));
    uint32_t *bi = malloc(n * sizeof(uint32_t));
    if (!count || !b || !bi) {
        free(count);
        free(b);
        free(bi);
        return SS_ENOMEM;
    }
    uint64_t *a = out_uniq;
    uint32_t *ai = out_order;
    for (size_t i = 0; i < n; i++) {
        uint64_t f = fps[i];
        a[i] = f;
        ai[i] = (uint32_t)i;
        for (int d = 0; d < 6; d++) count[d][(f >> (11 * d)) & 0x7ff]++;
    }
    for (int d = 0; d < 6; d++) {
        int sh = 11 * d;
        if (count[d][(a[0] >> sh) & 0x7ff] == n) continue;
        scatter(a, ai, b, bi, n, sh, 0x7ff, count[d]);
        uint64_t *t = a; a = b; b = t;
        uint32_t *ti = ai; ai = bi; bi = ti;
    }
    if (a != out_uniq) {
        memcpy(out_uniq, a, n * sizeof(uint64_t));
        memcpy(out_order, ai, n * sizeof(uint32_t));
        b = a;
        bi = ai;
    }
    size_t u = 0;
    for (size_t r = 0; r < n; r++) {
        if (r == 0 || out_uniq[r] != out_uniq[u - 1]) {
            out_starts[u] = (uint32_t)r;
            out_uniq[u++] = out_uniq[r];
        }
    }
    out_starts[u] = (uint32_t)n;
    *out_nuniq = u;
    free(count);
    free(b);
    free(bi);
    return 0;
}

static int64_t find_root(int64_t *parent, int64_t x) {
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

int ss_components(size_t n, const int64_t *a, const int64_t *b, size_t m,
                  int64_t *label) {
    for (size_t x = 0; x < n; x++) label[x] = (int64_t)x;
    for (size_t e = 0; e < m; e++) {
        if (a[e] < 0 || b[e] < 0 || (uint64_t)a[e] >= n || (uint64_t)b[e] >= n)
            return SS_EINVAL;
        int64_t ra = find_root(label, a[e]), rb = find_root(label, b[e]);
        /* the smaller root wins, so a root is its component's minimum */
        if (ra < rb) label[rb] = ra;
        else if (rb < ra) label[ra] = rb;
    }
    for (size_t x = 0; x < n; x++) label[x] = label[label[x]];
    return 0;
}
