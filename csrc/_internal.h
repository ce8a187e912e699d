/* Private helpers shared by the C sources of simstore.
 *
 * Not part of the cffi cdef (only simstore.h's CDEF region is): nothing here
 * is callable from Python. Names start with ss__ to keep them apart from the
 * public ss_ functions.
 */
#ifndef SIMSTORE_INTERNAL_H
#define SIMSTORE_INTERNAL_H

#include "simstore.h"

/* Use the POPCNT instruction where the CPU has it, chosen at load time. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
#define SS__CLONES __attribute__((target_clones("popcnt", "default")))
#else
#define SS__CLONES
#endif

/* murmur3's 64-bit finalizer: a bijection that mixes every input bit into
 * every output bit. */
static inline uint64_t ss__fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* Scratch of the text pipeline (csrc/simhash.c), sized once for a batch by
 * its longest document and reused for every document. */
typedef struct {
    uint8_t *buf;
    int64_t *starts, *ends;
    uint64_t *hashes;   /* shingle hashes, then distinct ones in first-seen order */
    int64_t *counts;    /* occurrences of each distinct hash */
    uint32_t *slots;    /* open-addressing set: 1 + index into hashes, 0 = empty */
    size_t nslots;      /* power of two >= 2 * max features */
    uint64_t spread[256];
} ss__text_scratch;

/* Returns 0, or -1 on bad offsets or out of memory (nothing to free then). */
int ss__text_scratch_alloc(ss__text_scratch *s, const int64_t *offsets,
                           size_t ndocs);
void ss__text_scratch_free(ss__text_scratch *s);

/* One document src[0..len) through tokens -> shingles -> hashes -> distinct
 * -> weighted simhash (weighting as in ss_fingerprint_texts). Leaves the
 * distinct hashes in s->hashes[0..*out_ndistinct), first-seen order, and
 * their counts in s->counts. */
uint64_t ss__text_fingerprint(ss__text_scratch *s, const uint8_t *src,
                              size_t len, int ngram, uint32_t seed,
                              int weighting, size_t *out_ndistinct);

#endif /* SIMSTORE_INTERNAL_H */
