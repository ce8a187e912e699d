/* The probe engine of sorted runs read in place: every probe of one query,
 * over every run set of every table (plus the unsorted scan runs), in one call.
 *
 * A level of a table is a set of disjoint sorted runs; the caller keeps only
 * their first keys (firsts) in process memory, the keys themselves (and each
 * run's directory) stay where LMDB maps them (page cache, shared by every
 * process). A probe finds its run by a binary search of firsts and flows
 * through a three-stage software pipeline, AHEAD probes apart: prefetch the
 * run's directory entry; read it and prefetch the bucket's keys; search the
 * bucket and check the keys of the range, crossing into the next runs when
 * the range does. A run without a directory is entered at a position
 * guessed by interpolation (permuted simhashes spread evenly) and searched
 * by galloping from there. The cache misses of consecutive probes overlap
 * instead of queueing.
 *
 * Probes go in mask order: the masks are ascending, so probes that share
 * their high header bits (and so pages) are adjacent.
 */
#include "_internal.h"

#include <stdlib.h>
#include <string.h>

enum {
    /* probes between the pipeline's stages: each stage's prefetches must land
     * before the next reads them, but too many in flight queue for the
     * cache's miss buffers and the page walks of a map's 4 KB pages (10M
     * k = 8 p50 at 8 / 12 / 16 / 32: ~0.95 / 0.90 / 1 / 1.2x of 16's) */
    AHEAD = 12,
    RING = 64,        /* probes in flight: a power of two > 2 * AHEAD */
    MAX_DIR_BITS = 24,
    LOCAL_HITS = 256, /* hits kept on the stack */
    SMALL_SORT = 24,  /* insertion sort up to this many hits */
};

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
        return SS_ENOMEM;
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

/* --- runs ------------------------------------------------------------------ */

/* The key at i of keys of width kw (8, or 4: low halves under high). */
static inline uint64_t key_at(const void *keys, uint64_t high, int kw, size_t i) {
    return kw == 8 ? ((const uint64_t *)keys)[i] : (high | ((const uint32_t *)keys)[i]);
}

static inline uint64_t run_key(const ss_run *r, size_t i) {
    return key_at(r->keys, r->high, r->kw, i);
}

static inline uint64_t run_val(const ss_run *r, size_t i) {
    return r->vw == 8 ? ((const uint64_t *)r->vals)[i]
                      : (uint64_t)((const uint32_t *)r->vals)[i];
}

/* Index of the last run whose first key is < v (0 when none is): where the
 * keys >= v start, even when equal keys span runs. */
static inline size_t run_of(const ss_runset *s, uint64_t v) {
    size_t lo = 0, n = s->nruns;
    const uint64_t *f = s->firsts;
    if (s->top) {
        uint64_t b = v >> s->tshift, last = ((uint64_t)1 << s->tbits) - 1;
        lo = s->top[b < last ? b : last];
        while (lo + 1 < n && f[lo + 1] < v) lo++;
        return lo;
    }
    while (n > 1) { /* branch-free steps: a mispredicted branch costs more than one */
        size_t half = n / 2;
        lo += (size_t)(f[lo + half] < v) * half;
        n -= half;
    }
    return lo;
}

/* Index of the first of n sorted keys (width kw, see key_at) that is >= v,
 * searched from the guess g: galloping out to a bracket, then halving it.
 * Inlined with a constant kw, the width test folds away. */
static inline size_t gallop(const void *keys, uint64_t high, int kw, size_t n,
                            size_t g, uint64_t v) {
    size_t lo, hi, step = 1; /* key lo - 1 < v <= key hi (bounds as sentinels) */
    if (g >= n) g = n ? n - 1 : 0;
    if (!n) return 0;
    if (key_at(keys, high, kw, g) < v) {
        lo = hi = g + 1;
        while (hi < n && key_at(keys, high, kw, hi) < v) {
            lo = hi + 1;
            hi += step;
            step *= 2;
        }
        if (hi > n) hi = n;
    } else {
        lo = hi = g;
        while (lo > 0 && key_at(keys, high, kw, lo - 1) >= v) {
            hi = lo - 1;
            lo = lo > step ? lo - step : 0;
            step *= 2;
        }
    }
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (key_at(keys, high, kw, mid) < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* gallop over n 64-bit keys (a probe's run: every key 64-bit, checked). */
static inline size_t lower_from(const uint64_t *keys, size_t n, size_t g,
                                uint64_t v) {
    return gallop(keys, 0, 8, n, g, v);
}

int ss_run_dir(const uint64_t *keys, size_t n, int dbits, int shift,
               uint32_t *dir) {
    if (!keys || !dir || n == 0 || n > UINT32_MAX || dbits < 1 ||
        dbits > MAX_DIR_BITS || shift < 0 || shift > 63)
        return SS_EINVAL;
    for (size_t i = 1; i < n; i++)
        if (keys[i - 1] > keys[i]) return SS_EINVAL;
    uint64_t base = keys[0] >> shift;
    size_t nb = (size_t)1 << dbits, i = 0;
    if ((keys[n - 1] >> shift) - base >= nb) return SS_EINVAL;
    for (size_t b = 0; b < nb; b++) {
        while (i < n && (keys[i] >> shift) - base < b) i++;
        dir[b] = (uint32_t)i;
    }
    dir[nb] = (uint32_t)n;
    return 0;
}

/* --- the probe pipeline ------------------------------------------------- */

/* The query as seen by one table. */
typedef struct {
    uint64_t qp;        /* the query permuted for the table */
    uint64_t tailmask;  /* the bits below the header */
    int k;
    int tail;           /* how many they are */
} probe_ctx;

/* One probe in flight: its run set, table context, value and run; lo..hi
 * the keys of its bucket of the run's directory (lo the bucket number until
 * stage 2 reads it; an exact probe's hi the bucket past its header value's),
 * or lo the interpolated guess of a run without one. */
typedef struct {
    const ss_runset *s;
    const probe_ctx *c;
    uint64_t v, top; /* the probe's range of keys */
    size_t r, lo, hi;
    int exact;
} flight;

typedef struct {
    flight ring[RING];
    size_t issued, resolved, done;
    const ss_runset *sets; /* the call's sets: a needed run is named by index */
    ss_need *need;
} pipeline;

/* --- runs not loaded yet ------------------------------------------------ */

static inline int unloaded(const ss_run *run) { return run->n == 0; }

/* Note that run r of set s is needed (once when needed twice in a row). */
static void need_run(ss_need *need, size_t s, size_t r) {
    uint64_t x = (uint64_t)s << 32 | (uint64_t)r;
    if (need->n && need->n <= need->cap && need->a[need->n - 1] == x) return;
    if (need->n < need->cap) need->a[need->n] = x;
    need->n++;
}

/* Stage 2: read the directory entries, prefetch the range's first keys (two
 * lines: a bucket at a probe's resolution holds ~15 keys at 1M, and a line
 * left to the scan missed the cache there; 1M k=8 p50 49 -> 40 us). An exact
 * probe (see pipe_push) has lo..hi the buckets of its whole header value, so
 * its range of keys comes out of the directory and the scan compares none. */
static inline void resolve(flight *f) {
    const ss_run *run = &f->s->runs[f->r];
    size_t nb = (size_t)1 << run->dbits, n = (size_t)run->n;
    if (!run->dir || f->lo > nb) return;
    size_t b = f->lo, e = f->exact ? f->hi : b + 1;
    if (b == nb) { /* past the run's last key */
        f->lo = f->hi = n;
        return;
    }
    /* clamped, so a damaged directory cannot read out of bounds */
    f->hi = run->dir[e] < n ? run->dir[e] : n;
    f->lo = run->dir[b] < f->hi ? run->dir[b] : f->hi;
    const uint64_t *keys = run->keys;
    __builtin_prefetch(keys + f->lo);
    if (f->exact) {
        /* every key of the range is read: the next line too when they reach it
         * (~2.4 keys a header value at 10M k = 8 straddle a line in ~1 of 5) */
        uintptr_t at = (uintptr_t)(keys + f->lo) & ~(uintptr_t)63;
        if (f->hi > f->lo + 1 && (uintptr_t)(keys + f->hi - 1) >= at + 64)
            __builtin_prefetch((const void *)(at + 64));
    } else if (f->hi > f->lo + 8)
        __builtin_prefetch(keys + f->lo + 8);
}

/* Stage 3: the keys in [v, top] within k of the permuted query,
 * from the probe's run on (a range may cross into later runs). */
static inline void finish(pipeline *pp, const flight *f, hits *h) {
    const ss_runset *s = f->s;
    const probe_ctx *c = f->c;
    uint64_t top = f->top;
    size_t r = f->r;
    const ss_run *run = &s->runs[r];
    const uint64_t *keys = run->keys;
    size_t i;
    if (f->exact) {
        /* the directory bounds the header value's keys: none compared to top */
        for (i = f->lo; i < f->hi; i++) {
            int d = __builtin_popcountll(keys[i] ^ c->qp);
            if (d <= c->k) hits_push(h, run_val(run, i), d);
        }
        if (i < (size_t)run->n) return; /* the next key's header is past v's */
    } else if (run->dir && run->shift <= c->tail)
        i = f->lo; /* the bucket holds only keys of v's header or later ones */
    else if (run->dir)
        i = f->lo + lower_from(keys + f->lo, f->hi - f->lo, 0, f->v);
    else
        i = lower_from(keys, (size_t)run->n, f->lo, f->v);
    for (;;) {
        size_t n = (size_t)run->n;
        for (; i < n && keys[i] <= top; i++) {
            int d = __builtin_popcountll(keys[i] ^ c->qp);
            if (d <= c->k) hits_push(h, run_val(run, i), d);
        }
        if (i < n || ++r >= s->nruns || s->firsts[r] > top) return;
        run = &s->runs[r];
        if (unloaded(run)) {
            need_run(pp->need, (size_t)(s - pp->sets), r);
            return;
        }
        keys = run->keys;
        i = 0;
    }
}

/* Stage 1 for probe v of set s: its run and its directory bucket (prefetched),
 * or a guess inside a run without one; then the later stages of older probes. */
static inline void pipe_push(pipeline *pp, const ss_runset *s,
                             const probe_ctx *c, uint64_t v, uint64_t top, hits *h) {
    flight *f;
    size_t r = run_of(s, v);
    const ss_run *run = &s->runs[r];
    uint64_t first = s->firsts[r];
    if (unloaded(run)) {
        need_run(pp->need, (size_t)(s - pp->sets), r);
        return;
    }
    f = &pp->ring[pp->issued++ % RING];
    f->s = s;
    f->c = c;
    f->v = v;
    f->top = top;
    f->r = r;
    f->lo = f->hi = 0;
    f->exact = 0;
    if (run->dir && run->shift <= c->tail && v > first) {
        /* buckets no wider than a header value: the value's keys are the
         * buckets b..e, and the directory entries b and e + 1 bound them */
        uint64_t base = first >> run->shift, nb = (uint64_t)1 << run->dbits;
        uint64_t b = (v >> run->shift) - base, e = (top >> run->shift) - base;
        f->exact = 1;
        f->lo = b < nb ? (size_t)b : (size_t)nb;
        f->hi = e < nb ? (size_t)e + 1 : (size_t)nb;
        __builtin_prefetch(run->dir + f->lo);
        __builtin_prefetch(run->dir + f->hi);
    } else if (v > first && run->dir) {
        uint64_t b = (v >> run->shift) - (first >> run->shift);
        size_t nb = (size_t)1 << run->dbits;
        f->lo = b < nb ? (size_t)b : nb;
        __builtin_prefetch(run->dir + f->lo);
    } else if (v > first && run->n > 1) {
        uint64_t last = r + 1 < s->nruns ? s->firsts[r + 1] : UINT64_MAX;
        /* the fraction (v - first) / (last - first), in 32-bit fixed point */
        int sh = 64 - __builtin_clzll(last - first);
        sh = sh > 32 ? sh - 32 : 0;
        uint64_t num = (v - first) >> sh, den = ((last - first) >> sh) + 1;
        f->lo = (size_t)((num * (uint64_t)run->n) / den);
        if (f->lo >= run->n) f->lo = (size_t)run->n - 1;
        __builtin_prefetch((const uint64_t *)run->keys + f->lo);
    }
    if (pp->issued - pp->resolved > AHEAD)
        resolve(&pp->ring[pp->resolved++ % RING]);
    if (pp->resolved - pp->done > AHEAD)
        finish(pp, &pp->ring[pp->done++ % RING], h);
}

static void pipe_drain(pipeline *pp, hits *h) {
    while (pp->resolved < pp->issued) resolve(&pp->ring[pp->resolved++ % RING]);
    while (pp->done < pp->resolved) finish(pp, &pp->ring[pp->done++ % RING], h);
}

/* Every key of a scan set within k of q. */
static void scan_set(const ss_runset *s, uint64_t q, int k, hits *h) {
    for (size_t r = 0; r < s->nruns; r++) {
        const ss_run *run = &s->runs[r];
        const uint64_t *keys = run->keys;
        for (size_t i = 0; i < run->n; i++) {
            int d = __builtin_popcountll(keys[i] ^ q);
            if (d <= k) hits_push(h, run_val(run, i), d);
        }
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
        if (pl->spans)
            for (int64_t i = total; i < total + pl->nmasks[t]; i++)
                if (pl->tails[t] + pl->spans[i] > 64) return 0;
        total += pl->nmasks[t];
    }
    return total == 0 || pl->masks;
}

/* Whether a set's runs can be read: widths known, pointers where n > 0,
 * firsts for a sorted set, a top index that names runs. */
int ss_runset_check(ss_runset *s) {
    int kw8 = 1;
    if (!s) return SS_EINVAL;
    s->checked = 0;
    if (s->table < -1 || (s->nruns && !s->runs)) return SS_EINVAL;
    if (s->table >= 0 && s->nruns && !s->firsts) return SS_EINVAL;
    if (s->top) {
        if (s->tbits < 1 || s->tbits > MAX_DIR_BITS || s->table < 0 || s->tshift < 0 ||
            s->tshift > 63 || s->tbits + s->tshift > 64)
            return SS_EINVAL;
        for (size_t b = 0; b < ((size_t)1 << s->tbits); b++)
            if (s->top[b] >= s->nruns && !(s->nruns == 0 && s->top[b] == 0)) return SS_EINVAL;
    }
    for (size_t r = 0; r < s->nruns; r++) {
        const ss_run *run = &s->runs[r];
        if ((run->kw != 8 && run->kw != 4) || (run->vw != 8 && run->vw != 4))
            return SS_EINVAL;
        if (run->dir && (run->kw != 8 || run->dbits < 1 || run->dbits > MAX_DIR_BITS ||
                         run->shift < 0 || run->shift > 63))
            return SS_EINVAL;
        if (run->n && (!run->keys || !run->vals)) return SS_EINVAL;
        /* a sorted run is never empty: n 0 is a run not loaded yet */
        if (!run->n && s->table >= 0 && (run->keys || run->vals || run->dir)) return SS_EINVAL;
        kw8 &= run->kw == 8;
    }
    s->checked = kw8 ? 2 : 1;
    return 0;
}

int ss_runset_load(ss_runset *s, size_t r, const ss_run *run) {
    if (!s || !run || !s->checked || s->table < 0 || r >= s->nruns) return SS_EINVAL;
    ss_run *at = (ss_run *)&s->runs[r];
    if (!unloaded(at) || run->n == 0 || run->n > UINT32_MAX || run->kw != at->kw ||
        (run->vw != 8 && run->vw != 4) || !run->keys || !run->vals)
        return SS_EINVAL;
    if (run->dir && (run->kw != 8 || run->dbits < 1 || run->dbits > MAX_DIR_BITS ||
                     run->shift < 0 || run->shift > 63 ||
                     run->dir[(size_t)1 << run->dbits] != run->n))
        return SS_EINVAL;
    if (run_key(run, 0) != s->firsts[r]) return SS_EINVAL;
    *at = *run;
    return 0;
}

/* Whether a set was checked (with 64-bit keys where probes or scans read
 * them) and is of a table below ntables. */
static inline int set_ok(const ss_runset *s, int32_t ntables, int need_kw8) {
    return s->checked >= (need_kw8 ? 2 : 1) && s->table < ntables && s->span >= 0 &&
           s->span <= 63;
}

/* Push every probe of every sorted set of table t (masks m[0..nm), spans sp
 * or NULL). A set's own span widens its probes: the masks ascend, so those
 * that then take the same range are adjacent, and only the first is pushed. */
static void probe_table(pipeline *pp, const probe_ctx *c, int t,
                        const uint64_t *m, const uint8_t *sp, size_t nm,
                        const ss_runset *sets, size_t nsets, hits *h) {
    uint64_t base = c->qp & ~c->tailmask;
    for (size_t s = 0; s < nsets; s++) {
        if (sets[s].table != t || sets[s].nruns == 0) continue;
        int own = sets[s].span;
        uint64_t last = 0, last_top = 0;
        int pushed = 0;
        for (size_t i = 0; i < nm; i++) {
            /* the span's bits below the header's (capped: past 64, the whole table) */
            int span = sp && sp[i] > own ? sp[i] : own;
            int w = c->tail + span;
            uint64_t low = w >= 64 ? UINT64_MAX : ((uint64_t)1 << w) - 1;
            uint64_t v = (base ^ m[i]) & ~low;
            if (pushed && v == last && (v | low) == last_top) continue;
            pipe_push(pp, &sets[s], c, v, v | low, h);
            last = v;
            last_top = v | low;
            pushed = 1;
        }
    }
}

/* Dedupe the hits and copy them out by distance, then value (a stable
 * counting sort of the value-sorted hits: the order a query answers in, so
 * the caller sorts nothing); the distinct count. Nothing is written when
 * they do not all fit in cap (the caller calls again with room). */
static size_t take_hits(hits *h, uint64_t *out_vals, uint8_t *out_dist,
                        size_t cap) {
    size_t m = dedupe_hits(h->a, h->n);
    size_t at[66] = {0};
    if (m > cap) return m;
    for (size_t i = 0; i < m; i++) at[h->a[i].d + 1]++;
    for (int d = 1; d < 66; d++) at[d] += at[d - 1];
    for (size_t i = 0; i < m; i++) {
        size_t j = at[h->a[i].d]++;
        out_vals[j] = h->a[i].v;
        out_dist[j] = (uint8_t)h->a[i].d;
    }
    return m;
}

/* flatten: the helpers' popcounts compile for each clone's target. */
#if defined(__GNUC__)
__attribute__((flatten))
#endif
SS__CLONES
int64_t ss_probe(uint64_t q, int k, const ss_probe_plan *plan,
                 const ss_runset *sets, size_t nsets, uint64_t *out_vals,
                 uint8_t *out_dist, size_t cap, ss_need *need) {
    uint64_t qp[64];
    probe_ctx ctx[64];
    ss_need none = {NULL, 0, 0};
    pipeline pp = {.issued = 0, .resolved = 0, .done = 0, .sets = sets,
                   .need = need ? need : &none};
    hits h;
    if (k < 0 || k > 64 || (nsets && !sets) ||
        (cap && (!out_vals || !out_dist)) || (need && need->cap && !need->a))
        return SS_EINVAL;
    pp.need->n = 0;
    if (!plan_ok(plan)) return SS_EINVAL;
    for (size_t s = 0; s < nsets; s++)
        if (!set_ok(&sets[s], plan->ntables, 1)) return SS_EINVAL;
    ss_permute_tables(q, plan->ntables, plan->nblocks, plan->src_shift,
                      plan->width, plan->dst_shift, qp);
    hits_init(&h);
    const uint64_t *m = plan->masks;
    const uint8_t *sp = plan->spans;
    for (int t = 0; t < plan->ntables; t++) {
        uint64_t tailmask = (1ULL << plan->tails[t]) - 1;
        ctx[t] = (probe_ctx){qp[t], tailmask, k, plan->tails[t]};
        probe_table(&pp, &ctx[t], t, m, sp, (size_t)plan->nmasks[t], sets,
                    nsets, &h);
        m += plan->nmasks[t];
        if (sp) sp += plan->nmasks[t];
    }
    pipe_drain(&pp, &h);
    for (size_t s = 0; s < nsets; s++)
        if (sets[s].table < 0) scan_set(&sets[s], q, k, &h);
    int64_t rc = h.oom                ? SS_ENOMEM
                 : pp.need->n         ? (need ? SS_ENEED : SS_EINVAL)
                                      : (int64_t)take_hits(&h, out_vals, out_dist, cap);
    hits_free(&h);
    return rc;
}

/* --- exact lookups ---------------------------------------------------------- */

enum { LOOKUP_BATCH = 16 }; /* lookups whose first reads are in flight at once */

/* Where key v would be in run r of set s (a sorted run of n > 1 keys from
 * firsts[r]), by interpolation: the keys of a run are spread evenly (permuted
 * simhashes, random band keys). The next run's first key bounds it; the
 * last run's own last key does. */
static inline size_t guess_in(const ss_runset *s, size_t r, const ss_run *run,
                              uint64_t v) {
    uint64_t first = s->firsts[r], n = run->n;
    uint64_t last = r + 1 < s->nruns ? s->firsts[r + 1] : run_key(run, n - 1);
    if (v <= first || last <= first) return 0;
    if (v >= last) return (size_t)n - 1;
    int sh = 64 - __builtin_clzll(last - first); /* 32-bit fixed point */
    sh = sh > 32 ? sh - 32 : 0;
    uint64_t num = (v - first) >> sh, den = ((last - first) >> sh) + 1;
    size_t g = (size_t)((num * n) / den);
    return g < n ? g : (size_t)n - 1;
}

static inline void prefetch_key(const ss_run *r, size_t i) {
    if (r->kw == 8) __builtin_prefetch((const uint64_t *)r->keys + i);
    else __builtin_prefetch((const uint32_t *)r->keys + i);
}

int64_t ss_lookup(const ss_runset *sets, size_t nsets, const uint64_t *qs,
                  size_t nq, uint64_t *out_vals, size_t cap, ss_need *need) {
    size_t m = 0;
    ss_need none = {NULL, 0, 0};
    if ((nsets && !sets) || (nq && !qs) || (cap && !out_vals) ||
        (need && need->cap && !need->a))
        return SS_EINVAL;
    if (!need) need = &none;
    need->n = 0;
    for (size_t s = 0; s < nsets; s++) {
        const ss_runset *set = &sets[s];
        if (set->table < 0 || !set_ok(set, 64, 0)) return SS_EINVAL;
        if (!set->nruns) continue;
        /* a batch at a time: find each query's run and guess its place, the key
         * there prefetched; then search from the guesses, their reads landed */
        for (size_t b = 0; b < nq; b += LOOKUP_BATCH) {
            size_t nb = nq - b < LOOKUP_BATCH ? nq - b : LOOKUP_BATCH;
            size_t run_at[LOOKUP_BATCH], at[LOOKUP_BATCH];
            for (size_t i = 0; i < nb; i++) {
                uint64_t q = qs[b + i];
                size_t r = run_of(set, q);
                const ss_run *run = &set->runs[r];
                run_at[i] = r;
                at[i] = 0;
                if (set->firsts[r] > q || unloaded(run) || run->n < 2) continue;
                at[i] = guess_in(set, r, run, q);
                prefetch_key(run, at[i]);
            }
            for (size_t i = 0; i < nb; i++) {
                uint64_t q = qs[b + i];
                size_t g = at[i];
                for (size_t r = run_at[i]; r < set->nruns && set->firsts[r] <= q; r++) {
                    const ss_run *run = &set->runs[r];
                    if (unloaded(run)) {
                        need_run(need, s, r);
                        g = 0;
                        continue;
                    }
                    size_t j = gallop(run->keys, run->high, run->kw, (size_t)run->n, g, q);
                    g = 0; /* a later run is searched from its start */
                    for (; j < run->n && run_key(run, j) == q; j++) {
                        if (m < cap) out_vals[m] = run_val(run, j);
                        m++;
                    }
                    if (j < run->n) break; /* a larger key: no later run has q */
                }
            }
        }
    }
    if (need->n) return need == &none ? SS_EINVAL : SS_ENEED;
    return (int64_t)m;
}
