/* Where a record's value lies in LMDB's map, read off its key's leaf node.
 *
 * py-lmdb touches every page of a value it returns (so that page faults happen
 * with the GIL released): fetching a 30-page run to probe 2 of its pages read
 * all 30 from disk on a store larger than the page cache. A cursor's key
 * buffer points into the leaf page holding the record's node, and a value
 * stored on overflow pages is named there by its first page number; this
 * computes the value's place from that number, checking the node and the
 * first overflow page (the one page read) against the file format of LMDB
 * 0.9 (simstore.h's SS_LMDB_ constants: the page header, the node header).
 */
#if defined(__linux__)
#define _DEFAULT_SOURCE /* madvise and MADV_HUGEPAGE under -std=c99 */
#include <sys/mman.h>
#endif
#include "_internal.h"

#include <string.h>

enum {
    PAGE_HEAD = SS_LMDB_PAGE_HEAD,
    NODE_HEAD = SS_LMDB_NODE_HEAD,
    P_BRANCH = SS_LMDB_P_BRANCH,
    P_LEAF = SS_LMDB_P_LEAF,
    P_OVERFLOW = SS_LMDB_P_OVERFLOW,
    P_KINDS = SS_LMDB_P_BRANCH | SS_LMDB_P_LEAF | SS_LMDB_P_OVERFLOW | SS_LMDB_P_LEAF2,
    F_BIGDATA = SS_LMDB_F_BIGDATA,
    MAX_DEPTH = SS_LMDB_MAX_DEPTH, /* deeper than any tree a 64-bit file can hold */
};

static uint16_t get16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t get32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t get64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The node of a record whose value is on overflow pages: its first page, or 0
 * when key's node is not such a record's (flags, key size). */
static uint64_t big_node(const uint8_t *key, size_t klen, uint64_t *size) {
    const uint8_t *node = key - NODE_HEAD;
    if (get16(node + 4) != F_BIGDATA || get16(node + 6) != klen)
        return 0;
    *size = (uint64_t)get16(node) | (uint64_t)get16(node + 2) << 16;
    return get64(key + klen);
}

/* Whether ov is overflow page `first` heading npages pages. */
static int overflow_ok(const uint8_t *ov, uint64_t first, uint64_t npages) {
    return get64(ov) == first && (get16(ov + 10) & P_OVERFLOW) && get32(ov + 12) == npages;
}

int ss_map_base(const uint8_t *key, size_t klen, const uint8_t *value, size_t vlen,
                uint32_t psize, uintptr_t *out_map) {
    if (key == NULL || value == NULL || out_map == NULL || psize < 512
        || (psize & (psize - 1)) || klen == 0 || klen > 0xFFFF)
        return SS_EINVAL;
    uint64_t size = 0, first = big_node(key, klen, &size);
    uintptr_t at = (uintptr_t)value;
    if (first < 2 || size != vlen || at % psize != PAGE_HEAD
        || first > (at - PAGE_HEAD) / psize
        || !overflow_ok(value - PAGE_HEAD, first, (PAGE_HEAD + size + psize - 1) / psize))
        return SS_EMAP;
    *out_map = at - PAGE_HEAD - first * psize;
    return SS_OK;
}

int64_t ss_map_value(const uint8_t *map, uint64_t pages, uint32_t psize,
                     const uint8_t *key, size_t klen, uint64_t *out_size) {
    if (map == NULL || key == NULL || out_size == NULL || psize < 512
        || (psize & (psize - 1)) || pages < 3 || pages > UINT64_MAX / psize
        || klen == 0 || klen > 0xFFFF)
        return SS_EINVAL;
    uintptr_t lo = (uintptr_t)map, at = (uintptr_t)key;
    uint64_t span = pages * (uint64_t)psize;
    if (at < lo || at - lo >= span)
        return SS_EMAP; /* not a buffer into this map */
    uint64_t off = at - lo, leaf = off / psize;
    uint64_t in_page = off - leaf * psize;
    if (leaf < 2 || in_page < PAGE_HEAD + NODE_HEAD
        || in_page + klen + sizeof(uint64_t) > psize)
        return SS_EMAP;
    const uint8_t *page = map + leaf * psize;
    if (get64(page) != leaf || (get16(page + 10) & (P_LEAF | SS_LMDB_P_LEAF2)) != P_LEAF)
        return SS_EMAP;
    uint64_t size = 0, first = big_node(key, klen, &size);
    uint64_t npages = (PAGE_HEAD + size + psize - 1) / psize;
    if (size == 0 || first < 2 || first >= pages || npages > pages - first)
        return SS_EMAP;
    const uint8_t *ov = map + first * psize;
    if (!overflow_ok(ov, first, npages))
        return SS_EMAP;
    *out_size = size;
    return (int64_t)(first * psize + PAGE_HEAD);
}

/* Page pgno of the map as a page of kind `want` (P_BRANCH or P_LEAF) whose
 * header checks out (its number, its bounds), its node count in *nnodes; NULL
 * otherwise. */
static const uint8_t *tree_page(const ss_map_tree *t, uint64_t pgno, uint16_t want,
                                size_t *nnodes) {
    uint32_t psize = t->psize;
    if (pgno < 2 || pgno >= t->pages) return NULL;
    const uint8_t *p = t->map + pgno * psize;
    uint16_t lower = get16(p + 12), upper = get16(p + 14);
    if (get64(p) != pgno || (get16(p + 10) & P_KINDS) != want || lower < PAGE_HEAD
        || lower > upper || upper > psize || (lower & 1))
        return NULL;
    *nnodes = (size_t)(lower - PAGE_HEAD) / 2;
    return p;
}

/* Node i of page p, its key inside the page; NULL otherwise. */
static const uint8_t *tree_node(const uint8_t *p, uint32_t psize, size_t i) {
    uint16_t at = get16(p + PAGE_HEAD + 2 * i);
    if (at < get16(p + 14) || (at & 1) || at > psize - NODE_HEAD
        || (size_t)at + NODE_HEAD + get16(p + at + 6) > psize)
        return NULL;
    return p + at;
}

/* A node's key against the 8-byte key q, in LMDB's default order (bytes, then
 * length). */
static int key_cmp(const uint8_t *node, const uint8_t *q) {
    uint16_t ks = get16(node + 6);
    int c = memcmp(node + NODE_HEAD, q, ks < 8 ? ks : 8);
    return c ? c : (int)ks - 8;
}

/* Where key q's value lies (offset in the map, *size), 0 when the tree has no
 * such key, SS_EMAP when a page does not read as expected. */
static int64_t tree_get(const ss_map_tree *t, const uint8_t *q, uint32_t *size) {
    const uint8_t *map = t->map;
    uint64_t pgno = t->root, pages = t->pages;
    uint32_t psize = t->psize;
    size_t n = 0;
    for (uint32_t level = 1; level < t->depth; level++) {
        const uint8_t *p = tree_page(t, pgno, P_BRANCH, &n);
        if (p == NULL || n == 0) return SS_EMAP;
        size_t lo = 1, hi = n; /* the last node whose key is <= q (node 0: none) */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            const uint8_t *node = tree_node(p, psize, mid);
            if (node == NULL) return SS_EMAP;
            if (key_cmp(node, q) <= 0) lo = mid + 1;
            else hi = mid;
        }
        const uint8_t *node = tree_node(p, psize, lo - 1);
        if (node == NULL) return SS_EMAP;
        pgno = (uint64_t)get16(node) | (uint64_t)get16(node + 2) << 16
               | (uint64_t)get16(node + 4) << 32;
    }
    const uint8_t *p = tree_page(t, pgno, P_LEAF, &n);
    if (p == NULL) return SS_EMAP;
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const uint8_t *node = tree_node(p, psize, mid);
        if (node == NULL) return SS_EMAP;
        int c = key_cmp(node, q);
        if (c == 0) {
            uint64_t len = (uint64_t)get16(node) | (uint64_t)get16(node + 2) << 16;
            uint16_t flags = get16(node + 4), ks = get16(node + 6);
            const uint8_t *val = node + NODE_HEAD + ks;
            if (flags == 0) {
                if ((size_t)(val - p) + len > psize) return SS_EMAP;
                *size = (uint32_t)len;
                return (int64_t)(val - map);
            }
            if (flags != F_BIGDATA || (size_t)(val - p) + 8 > psize) return SS_EMAP;
            uint64_t first = get64(val), npages = (PAGE_HEAD + len + psize - 1) / psize;
            if (first < 2 || first >= pages || npages > pages - first
                || !overflow_ok(map + first * psize, first, npages))
                return SS_EMAP;
            *size = (uint32_t)len;
            return (int64_t)(first * psize + PAGE_HEAD);
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

int ss_map_tree_of_record(const uint8_t *rec, size_t len, ss_map_tree *tree) {
    if (rec == NULL || tree == NULL) return SS_EINVAL;
    if (len != SS_LMDB_DB_RECORD) return SS_EMAP;
    uint64_t root = get64(rec + SS_LMDB_DB_ROOT);
    tree->root = root;
    tree->depth = root == SS_LMDB_NO_ROOT ? 0 : get16(rec + SS_LMDB_DB_DEPTH);
    return SS_OK;
}

int ss_map_lookup(const ss_map_tree *tree, const uint64_t *keys, size_t n,
                  int64_t *out_off, uint32_t *out_len) {
    if (tree == NULL || tree->map == NULL
        || (n && (keys == NULL || out_off == NULL || out_len == NULL))
        || tree->psize < 512 || (tree->psize & (tree->psize - 1))
        || tree->pages > UINT64_MAX / tree->psize)
        return SS_EINVAL;
    if (tree->depth > MAX_DEPTH) return SS_EMAP; /* no tree of a readable file is this deep */
    for (size_t i = 0; i < n; i++) {
        uint8_t q[8];
        for (int b = 0; b < 8; b++) q[b] = (uint8_t)(keys[i] >> (56 - 8 * b));
        out_len[i] = 0;
        out_off[i] = tree->depth == 0 ? 0 : tree_get(tree, q, &out_len[i]);
        if (out_off[i] < 0) return SS_EMAP;
    }
    return SS_OK;
}

int ss_map_base_of_page(const uint8_t *at, uint32_t psize, uintptr_t *out_map) {
    if (at == NULL || out_map == NULL || psize < 512 || (psize & (psize - 1)))
        return SS_EINVAL;
    const uint8_t *p = (const uint8_t *)((uintptr_t)at & ~(uintptr_t)(psize - 1));
    uint64_t pgno = get64(p);
    uint16_t lower = get16(p + 12), upper = get16(p + 14);
    if (pgno < 2 || pgno > (uintptr_t)p / psize || (get16(p + 10) & P_KINDS) != P_LEAF
        || lower < PAGE_HEAD || lower > upper || upper > psize || at < p + upper)
        return SS_EMAP;
    *out_map = (uintptr_t)p - pgno * psize;
    return SS_OK;
}

int ss_map_advise_huge(uintptr_t start, uint64_t size) {
    if (!start || !size || start % 4096 || size % 4096 || start + size < start) return SS_EINVAL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    return madvise((void *)start, (size_t)size, MADV_HUGEPAGE) == 0 ? SS_OK : SS_EOS;
#else
    return SS_EOS;
#endif
}

int ss_map_release(uintptr_t start, uint64_t size) {
    if (!start || !size || start % 4096 || size % 4096 || start + size < start) return SS_EINVAL;
#if defined(__linux__)
    return madvise((void *)start, (size_t)size, MADV_DONTNEED) == 0 ? SS_OK : SS_EOS;
#else
    return SS_EOS;
#endif
}
