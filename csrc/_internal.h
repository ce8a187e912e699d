/* Private helpers shared by the C sources of simstore.
 *
 * Not part of the cffi cdef (only simstore.h's CDEF region is): nothing here
 * is callable from Python. Names start with ss__ to keep them apart from the
 * public ss_ functions.
 */
#ifndef SIMSTORE_INTERNAL_H
#define SIMSTORE_INTERNAL_H

#include "simstore.h"

/* Use the POPCNT instruction where the CPU has it, chosen at load time. The
 * choice is an ifunc, which glibc's loader resolves and musl's refuses
 * ("unsupported relocation type 37"): glibc only (its stdint.h, included by
 * simstore.h, defines __GLIBC__). */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__GLIBC__)
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
 * its longest document and reused for every document; the Unicode tokenizer
 * (csrc/unicode.c) grows it when normalization lengthens a document. */
typedef struct {
    uint8_t *buf;       /* the tokens, lower-cased, one space apart */
    size_t bufcap;
    int64_t *starts, *ends;
    uint64_t *hashes;   /* shingle hashes, then distinct ones in first-seen order */
    int64_t *counts;    /* occurrences of each distinct hash */
    size_t tokcap;      /* entries of starts, ends, hashes, counts */
    uint32_t *slots;    /* open-addressing set: 1 + index into hashes, 0 = empty */
    size_t nslots;      /* power of two >= 2 * tokcap */
    uint32_t *cps;      /* Unicode path: the document's NFKC code points */
    size_t cpscap;
    uint32_t *seg;      /* Unicode path: one stretch being normalized */
    size_t segcap;
    uint64_t spread[256];
} ss__text_scratch;

/* Returns 0, or -1 on bad offsets or out of memory (nothing to free then). */
int ss__text_scratch_alloc(ss__text_scratch *s, const int64_t *offsets,
                           size_t ndocs);
void ss__text_scratch_free(ss__text_scratch *s);
/* Room for bytes of tokens in s->buf and for ntok tokens. Returns 0, -1 out
 * of memory (s stays valid). */
int ss__text_scratch_reserve(ss__text_scratch *s, size_t bytes, size_t ntok);

/* Tokenizers: one document src[0..len) to its tokens in s->buf (lower-cased,
 * one space apart; token t is s->buf[s->starts[t] .. s->ends[t])). Unicode
 * (csrc/unicode.c): UTF-8 (lone surrogates as their 3-byte forms), NFKC,
 * str.lower, letters/digits of any script, Han/Kana one per token, from
 * tables generated from Python's unicodedata. Bytes: ASCII letters/digits and
 * every byte >= 0x80 are word bytes (the caller prepared the text). Return the
 * token count, or -1 out of memory. */
int64_t ss__tokenize_unicode(ss__text_scratch *s, const uint8_t *src, size_t len);
int64_t ss__tokenize_bytes(ss__text_scratch *s, const uint8_t *src, size_t len);

/* One document src[0..len) through tokens -> shingles -> hashes -> distinct
 * -> weighted simhash (weighting as in ss_fingerprint_texts), tokenized by the
 * Unicode tables when unicode is nonzero and the document is not all ASCII,
 * else by bytes. Leaves the distinct hashes in s->hashes[0..*out_ndistinct),
 * first-seen order, and their counts in s->counts. Returns 0, -1 out of
 * memory. */
int ss__text_fingerprint(ss__text_scratch *s, const uint8_t *src, size_t len,
                         int ngram, uint32_t seed, int weighting, int unicode,
                         uint64_t *out_fp, size_t *out_ndistinct);

#endif /* SIMSTORE_INTERNAL_H */
