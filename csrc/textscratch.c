/* The text pipeline's scratch (textscratch.h): allocation, growth, release. */
#include <stdlib.h>
#include <string.h>
#include "simstore.h"
#include "textscratch.h"

void ss__make_spread(uint64_t *spread) {
    for (int x = 0; x < 256; x++) {
        uint64_t v = 0;
        for (int j = 0; j < 8; j++) v |= (uint64_t)((x >> j) & 1) << (8 * j);
        spread[x] = v;
    }
}

void ss__text_scratch_free(ss__text_scratch *s) {
    free(s->buf); free(s->starts); free(s->ends); free(s->hashes);
    free(s->counts); free(s->slots); free(s->cps); free(s->seg);
    memset(s, 0, sizeof(*s));
}

/* *p grown to hold at least want items of size bytes (doubling). */
static int grow(void *p, size_t *cap, size_t want, size_t size) {
    if (want <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < want) n *= 2;
    void *q = realloc(*(void **)p, n * size);
    if (!q) return SS_ENOMEM;
    *(void **)p = q;
    *cap = n;
    return 0;
}

int ss__text_scratch_reserve(ss__text_scratch *s, size_t bytes, size_t ntok) {
    if (grow(&s->buf, &s->bufcap, bytes + 1, 1) != 0) return SS_ENOMEM;
    if (ntok <= s->tokcap) return 0;
    size_t cap = s->tokcap, c2 = cap, c3 = cap, c4 = cap;
    if (grow(&s->starts, &cap, ntok, sizeof(int64_t)) != 0 ||
        grow(&s->ends, &c2, ntok, sizeof(int64_t)) != 0 ||
        grow(&s->hashes, &c3, ntok, sizeof(uint64_t)) != 0 ||
        grow(&s->counts, &c4, ntok, sizeof(int64_t)) != 0)
        return SS_ENOMEM;  /* the arrays grown so far stay valid, tokcap unchanged */
    size_t nslots = s->nslots ? s->nslots : 16;
    while (nslots < 2 * cap) nslots <<= 1;
    if (nslots != s->nslots) {
        uint32_t *slots = realloc(s->slots, nslots * sizeof(uint32_t));
        if (!slots) return SS_ENOMEM;
        s->slots = slots;
        s->nslots = nslots;
    }
    s->tokcap = cap;
    return 0;
}

int ss__text_scratch_alloc(ss__text_scratch *s, const int64_t *offsets,
                           size_t ndocs) {
    size_t maxlen = 0;
    memset(s, 0, sizeof(*s));
    for (size_t d = 0; d < ndocs; d++) {
        if (offsets[d + 1] < offsets[d]) return SS_EINVAL;
        size_t l = (size_t)(offsets[d + 1] - offsets[d]);
        if (l > maxlen) maxlen = l;
    }
    if (maxlen > (size_t)1 << 31) return SS_EINVAL;  /* slot indices are 32-bit */
    /* a document of L bytes has at most (L + 1) / 2 tokens */
    if (ss__text_scratch_reserve(s, maxlen, maxlen / 2 + 2) != 0) {
        ss__text_scratch_free(s);
        return SS_ENOMEM;
    }
    ss__make_spread(s->spread);
    return 0;
}
