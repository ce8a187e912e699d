/* Where a record's value lies in LMDB's map, read off its key's leaf node.
 *
 * py-lmdb touches every page of a value it returns (so that page faults happen
 * with the GIL released): fetching a 30-page run to probe 2 of its pages read
 * all 30 from disk on a store larger than the page cache. A cursor's key
 * buffer points into the leaf page holding the record's node, and a value
 * stored on overflow pages is named there by its first page number; this
 * computes the value's place from that number, checking the node and the
 * first overflow page (the one page read) against the file format of LMDB
 * 0.9 (also what simstore/store/check parses):
 *
 *   page header (16 bytes): page number (8), pad (2), flags (2), then lower
 *     and upper bounds (2 + 2) or, on an overflow page, its page count (4);
 *   leaf node: data size low / high halves (2 + 2), flags (2), key size (2),
 *     the key, then (F_BIGDATA) the value's first overflow page number (8).
 */
#if defined(__linux__)
#define _DEFAULT_SOURCE /* madvise and MADV_HUGEPAGE under -std=c99 */
#include <sys/mman.h>
#endif
#include "_internal.h"

#include <string.h>

enum {
    PAGE_HEAD = 16,
    NODE_HEAD = 8,
    P_LEAF = 0x02,
    P_OVERFLOW = 0x04,
    P_LEAF2 = 0x20,
    F_BIGDATA = 0x01,
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
        return -2;
    uint64_t size = 0, first = big_node(key, klen, &size);
    uintptr_t at = (uintptr_t)value;
    if (first < 2 || size != vlen || at % psize != PAGE_HEAD
        || first > (at - PAGE_HEAD) / psize
        || !overflow_ok(value - PAGE_HEAD, first, (PAGE_HEAD + size + psize - 1) / psize))
        return -1;
    *out_map = at - PAGE_HEAD - first * psize;
    return 0;
}

int64_t ss_map_value(const uint8_t *map, uint64_t pages, uint32_t psize,
                     const uint8_t *key, size_t klen, uint64_t *out_size) {
    if (map == NULL || key == NULL || out_size == NULL || psize < 512
        || (psize & (psize - 1)) || pages < 3 || pages > UINT64_MAX / psize
        || klen == 0 || klen > 0xFFFF)
        return -2;
    uintptr_t lo = (uintptr_t)map, at = (uintptr_t)key;
    uint64_t span = pages * (uint64_t)psize;
    if (at < lo || at - lo >= span)
        return -1; /* not a buffer into this map */
    uint64_t off = at - lo, leaf = off / psize;
    uint64_t in_page = off - leaf * psize;
    if (leaf < 2 || in_page < PAGE_HEAD + NODE_HEAD
        || in_page + klen + sizeof(uint64_t) > psize)
        return -1;
    const uint8_t *page = map + leaf * psize;
    if (get64(page) != leaf || (get16(page + 10) & (P_LEAF | P_LEAF2)) != P_LEAF)
        return -1;
    uint64_t size = 0, first = big_node(key, klen, &size);
    uint64_t npages = (PAGE_HEAD + size + psize - 1) / psize;
    if (size == 0 || first < 2 || first >= pages || npages > pages - first)
        return -1;
    const uint8_t *ov = map + first * psize;
    if (!overflow_ok(ov, first, npages))
        return -1;
    *out_size = size;
    return (int64_t)(first * psize + PAGE_HEAD);
}

int ss_map_advise_huge(uintptr_t start, uint64_t size) {
    if (!start || !size || start % 4096 || size % 4096 || start + size < start) return -2;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    return madvise((void *)start, (size_t)size, MADV_HUGEPAGE) == 0 ? 0 : -1;
#else
    return -1;
#endif
}
