/* The probe engine of in-memory sorted runs: every probe of one query, over
 * every run of every table (plus the unsorted scan runs), in one call.
 *
 * A sorted run keeps its permuted keys ascending with a directory over their
 * top dbits (ss_build_dir), so a probe is a directory lookup plus a short
 * search inside one bucket. Probes flow through a three-stage software
 * pipeline (prefetch the directory entry; read it and prefetch the bucket;
 * search the bucket), AHEAD probes apart, over every run of every table, so
 * the cache misses of consecutive probes overlap instead of queueing.
 *
 * Probes go in mask order, not sorted by value: the masks are ascending, so
 * probes that share their high header bits (and so directory lines and
 * pages) are already adjacent, and a full sort measured slower than the
 * locality it bought.
 */
#include "_internal.h"

#include <stdlib.h>
#include <string.h>

enum {
    MAX_DIR_BITS = 26,
    AHEAD = 16,       /* probes between the pipeline's stages */
    RING = 64,        /* probes in flight: a power of two > 2 * AHEAD */
    LOCAL_HITS = 256, /* hits kept on the stack */
    SMALL_SORT = 24,  /* insertion sort up to this many hits */
};

/* --- directory -------------------------------------------------------- */

/* The top dbits of key (0 when dbits is 0), without a shift by 64. */
static inline uint64_t bucket_of(uint64_t key, int dbits) {
    return (key >> 1) >> (63 - dbits);
}

int ss_build_dir(const uint64_t *keys, size_t n, int dbits, uint64_t *dir) {
    if (dbits < 0 || dbits > MAX_DIR_BITS || (n && !keys) || !dir) return -2;
    for (size_t i = 1; i < n; i++)
        if (keys[i - 1] > keys[i]) return -2;
    uint64_t nb = 1ULL << dbits;
    size_t i = 0;
    for (uint64_t p = 0; p < nb; p++) {
        while (i < n && bucket_of(keys[i], dbits) < p) i++;
        dir[p] = i;
    }
    dir[nb] = n;
    return 0;
}

/* --- hits --------------------------------------------------------------- */

typedef struct {
    uint64_t v;
    uint64_t d;
} hit;

typedef struct {
    hit *a;     /* local, or malloc'ed once it outgrows local */
    size_t n, cap;
    int oom;
    hit local[LOCAL_HITS];
} hits;

static void hits_init(hits *h) {
    h->a = h->local;
    h->n = 0;
    h->cap = LOCAL_HITS;
    h->oom = 0;
}

static void hits_free(hits *h) {
    if (h->a != h->local) free(h->a);
}

/* Double the hit buffer; on failure flag it and keep what it has. */
static int hits_grow(hits *h) {
    size_t cap = 2 * h->cap;
    hit *a = malloc(cap * sizeof *a);
    if (!a) {
        h->oom = 1;
        return -1;
    }
    memcpy(a, h->a, h->n * sizeof *a);
    hits_free(h);
    h->a = a;
    h->cap = cap;
    return 0;
}

static inline void hits_push(hits *h, uint64_t v, int d) {
    if (h->n == h->cap && (h->oom || hits_grow(h))) return;
    h->a[h->n].v = v;
    h->a[h->n].d = (uint64_t)d;
    h->n++;
}

static int cmp_hit(const void *a, const void *b) {
    const hit *x = a, *y = b;
    if (x->v != y->v) return (x->v > y->v) - (x->v < y->v);
    return (x->d > y->d) - (x->d < y->d);
}

static void sort_hits(hit *a, size_t n) {
    if (n > SMALL_SORT) {
        qsort(a, n, sizeof *a, cmp_hit);
        return;
    }
    for (size_t i = 1; i < n; i++) {
        hit x = a[i];
        size_t j = i;
        while (j > 0 && cmp_hit(&a[j - 1], &x) > 0) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* Sort by value, keep each value once with its least distance; the count. */
static size_t dedupe_hits(hit *a, size_t n) {
    size_t m = 0;
    sort_hits(a, n);
    for (size_t i = 0; i < n; i++)
        if (m == 0 || a[m - 1].v != a[i].v) a[m++] = a[i];
    return m;
}

/* --- the probe pipeline ------------------------------------------------- */

/* The query as seen by one table. */
typedef struct {
    uint64_t qp;        /* the query permuted for the table */
    uint64_t tailmask;  /* the bits below the header */
    int k;
    int hbits;          /* header bits (a run with as many dbits: exact) */
} probe_ctx;

/* One probe in flight: its run, table context and value; lo holds the
 * directory bucket until the directory is read, then [lo, hi) is the bucket. */
typedef struct {
    const ss_segment *sg;
    const probe_ctx *c;
    uint64_t v;
    size_t lo, hi;
} flight;

typedef struct {
    flight ring[RING];
    size_t issued, resolved, done;
} pipeline;

/* Index of the first of a[0..n) that is >= v. */
static inline size_t lower_bound(const uint64_t *a, size_t n, uint64_t v) {
    const uint64_t *p = a;
    while (n > 1) {
        size_t half = n / 2;
        p = p[half - 1] < v ? p + half : p;
        n -= half;
    }
    return (size_t)(p - a) + (n == 1 && *p < v);
}

/* Stage 2: read the directory entry, prefetch the bucket's first key. */
static inline void resolve(flight *f) {
    const uint64_t *dir = f->sg->dir;
    size_t p = f->lo, n = f->sg->n;
    /* clamped, so a damaged directory cannot read out of bounds */
    f->hi = dir[p + 1] < n ? dir[p + 1] : n;
    f->lo = dir[p] < f->hi ? dir[p] : f->hi;
    __builtin_prefetch(f->sg->keys + f->lo);
}

/* The value of entry i of a run (64- or 32-bit values). */
static inline uint64_t seg_val(const ss_segment *sg, size_t i) {
    return sg->vals ? sg->vals[i] : (uint64_t)sg->vals32[i];
}

/* Stage 3: the keys of the bucket within [v, v | tailmask] (all of them when
 * the bucket is exact) and within k of the permuted query, into h. */
static inline void finish(const flight *f, hits *h) {
    const uint64_t *keys = f->sg->keys;
    const probe_ctx *c = f->c;
    size_t lo = f->lo, hi = f->hi;
    if (f->sg->dbits != c->hbits) {
        uint64_t top = f->v | c->tailmask;
        lo += lower_bound(keys + lo, hi - lo, f->v);
        for (; lo < hi && keys[lo] <= top; lo++) {
            int d = __builtin_popcountll(keys[lo] ^ c->qp);
            if (d <= c->k) hits_push(h, seg_val(f->sg, lo), d);
        }
        return;
    }
    for (; lo < hi; lo++) {
        int d = __builtin_popcountll(keys[lo] ^ c->qp);
        if (d <= c->k) hits_push(h, seg_val(f->sg, lo), d);
    }
}

/* Stage 1 for probe v of run sg, and the later stages of older probes. */
static inline void pipe_push(pipeline *pp, const ss_segment *sg,
                             const probe_ctx *c, uint64_t v, hits *h) {
    flight *f = &pp->ring[pp->issued++ % RING];
    f->sg = sg;
    f->c = c;
    f->v = v;
    f->lo = bucket_of(v, sg->dbits);
    __builtin_prefetch(sg->dir + f->lo);
    if (pp->issued - pp->resolved > AHEAD)
        resolve(&pp->ring[pp->resolved++ % RING]);
    if (pp->resolved - pp->done > AHEAD)
        finish(&pp->ring[pp->done++ % RING], h);
}

/* The later stages of every probe still in flight. */
static void pipe_drain(pipeline *pp, hits *h) {
    while (pp->resolved < pp->issued) resolve(&pp->ring[pp->resolved++ % RING]);
    while (pp->done < pp->resolved) finish(&pp->ring[pp->done++ % RING], h);
}

/* Every key of an unsorted run within k of q. */
static void scan_run(const ss_segment *sg, uint64_t q, int k, hits *h) {
    const uint64_t *keys = sg->keys;
    for (size_t i = 0; i < sg->n; i++) {
        int d = __builtin_popcountll(keys[i] ^ q);
        if (d <= k) hits_push(h, seg_val(sg, i), d);
    }
}

/* --- the query ------------------------------------------------------------ */

static int plan_ok(const ss_probe_plan *pl) {
    if (!pl || pl->ntables < 1 || pl->ntables > 64 || pl->nblocks < 1 ||
        pl->nblocks > 64 || !pl->src_shift || !pl->width || !pl->dst_shift ||
        !pl->tails || !pl->nmasks)
        return 0;
    int64_t total = 0;
    for (int32_t t = 0; t < pl->ntables; t++) {
        if (pl->tails[t] > 63 || pl->nmasks[t] < 0) return 0;
        total += pl->nmasks[t];
    }
    return total == 0 || pl->masks;
}

static int segments_ok(const ss_probe_plan *pl, const ss_segment *segs,
                       size_t nsegs) {
    for (size_t s = 0; s < nsegs; s++) {
        const ss_segment *sg = &segs[s];
        if (sg->table < -1 || sg->table >= pl->ntables) return 0;
        if (sg->n && (!sg->keys || (!sg->vals && !sg->vals32))) return 0;
        if (sg->table < 0) continue;
        int hbits = 64 - pl->tails[sg->table];
        if (sg->dbits < 0 || sg->dbits > MAX_DIR_BITS || sg->dbits > hbits ||
            !sg->dir)
            return 0;
    }
    return 1;
}

/* Push every probe of every sorted run of table t (masks m[0..nm)). */
static void probe_table(pipeline *pp, const probe_ctx *c, int t,
                        const uint64_t *m, size_t nm, const ss_segment *segs,
                        size_t nsegs, hits *h) {
    uint64_t base = c->qp & ~c->tailmask;
    for (size_t s = 0; s < nsegs; s++) {
        if (segs[s].table != t || segs[s].n == 0) continue;
        for (size_t i = 0; i < nm; i++)
            pipe_push(pp, &segs[s], c, base ^ m[i], h);
    }
}

/* Sort and dedupe the hits, copy at most cap out; the distinct count. */
static size_t take_hits(hits *h, uint64_t *out_vals, uint8_t *out_dist,
                        size_t cap) {
    size_t m = dedupe_hits(h->a, h->n);
    for (size_t i = 0; i < m && i < cap; i++) {
        out_vals[i] = h->a[i].v;
        out_dist[i] = (uint8_t)h->a[i].d;
    }
    return m;
}

/* flatten: the helpers' popcounts compile for each clone's target. */
#if defined(__GNUC__)
__attribute__((flatten))
#endif
SS__CLONES
int64_t ss_probe(uint64_t q, int k, const ss_probe_plan *plan,
                 const ss_segment *segs, size_t nsegs, uint64_t *out_vals,
                 uint8_t *out_dist, size_t cap) {
    uint64_t qp[64];
    probe_ctx ctx[64];
    pipeline pp = {.issued = 0, .resolved = 0, .done = 0};
    hits h;
    if (k < 0 || k > 64 || (nsegs && !segs) ||
        (cap && (!out_vals || !out_dist)))
        return -2;
    if (!plan_ok(plan) || !segments_ok(plan, segs, nsegs)) return -2;
    ss_permute_tables(q, plan->ntables, plan->nblocks, plan->src_shift,
                      plan->width, plan->dst_shift, qp);
    hits_init(&h);
    const uint64_t *m = plan->masks;
    for (int t = 0; t < plan->ntables; t++) {
        uint64_t tailmask = (1ULL << plan->tails[t]) - 1;
        ctx[t] = (probe_ctx){qp[t], tailmask, k, 64 - plan->tails[t]};
        probe_table(&pp, &ctx[t], t, m, (size_t)plan->nmasks[t], segs, nsegs,
                    &h);
        m += plan->nmasks[t];
    }
    pipe_drain(&pp, &h);
    for (size_t s = 0; s < nsegs; s++)
        if (segs[s].table < 0) scan_run(&segs[s], q, k, &h);
    int64_t rc = h.oom ? -1 : (int64_t)take_hits(&h, out_vals, out_dist, cap);
    hits_free(&h);
    return rc;
}

/* --- exact lookups ---------------------------------------------------------- */

int64_t ss_lookup(const ss_segment *segs, size_t nsegs, const uint64_t *qs,
                  size_t nq, uint64_t *out_vals, size_t cap) {
    size_t m = 0;
    if ((nsegs && !segs) || (nq && !qs) || (cap && !out_vals)) return -2;
    for (size_t s = 0; s < nsegs; s++) {
        const ss_segment *sg = &segs[s];
        if (!sg->n) continue;
        if (sg->table < 0 || !sg->keys || (!sg->vals && !sg->vals32) || !sg->dir ||
            sg->dbits < 0 || sg->dbits > MAX_DIR_BITS)
            return -2;
        for (size_t i = 0; i < nq; i++) {
            uint64_t q = qs[i], b = bucket_of(q, sg->dbits);
            /* clamped, so a damaged directory cannot read out of bounds */
            size_t hi = sg->dir[b + 1] < sg->n ? sg->dir[b + 1] : sg->n;
            size_t lo = sg->dir[b] < hi ? sg->dir[b] : hi;
            lo += lower_bound(sg->keys + lo, hi - lo, q);
            for (; lo < hi && sg->keys[lo] == q; lo++) {
                if (m < cap) out_vals[m] = seg_val(sg, lo);
                m++;
            }
        }
    }
    return (int64_t)m;
}
