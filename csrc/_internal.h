/* Private helpers shared by the C sources of simstore.
 *
 * Not part of the cffi cdef (only simstore.h's CDEF region is): nothing here
 * is callable from Python. Names start with ss__ to keep them apart from the
 * public ss_ functions.
 */
#ifndef SIMSTORE_INTERNAL_H
#define SIMSTORE_INTERNAL_H

#include "simstore.h"
#include "textscratch.h"

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

/* Tokenizers: one document src[0..len) to its tokens in s->buf (lower-cased,
 * one space apart; token t is s->buf[s->starts[t] .. s->ends[t])). Unicode
 * (csrc/unicode.c): UTF-8 (lone surrogates as their 3-byte forms), NFKC,
 * str.lower, letters/digits of any script, Han/Kana one per token, from
 * tables generated from Python's unicodedata. Bytes: ASCII letters/digits and
 * every byte >= 0x80 are word bytes (the caller prepared the text). Return the
 * token count, or SS_ENOMEM out of memory. */
int64_t ss__tokenize_unicode(ss__text_scratch *s, const uint8_t *src, size_t len);
int64_t ss__tokenize_bytes(ss__text_scratch *s, const uint8_t *src, size_t len);

/* One document src[0..len) through tokens -> shingles -> hashes -> distinct
 * -> weighted simhash (weighting as in ss_fingerprint_texts), tokenized by the
 * Unicode tables when unicode is nonzero and the document is not all ASCII,
 * else by bytes. Leaves the distinct hashes in s->hashes[0..*out_ndistinct),
 * first-seen order, and their counts in s->counts. Returns SS_OK, SS_ENOMEM out of
 * memory. */
int ss__text_fingerprint(ss__text_scratch *s, const uint8_t *src, size_t len,
                         int ngram, uint32_t seed, int weighting, int unicode,
                         uint64_t *out_fp, size_t *out_ndistinct);

#endif /* SIMSTORE_INTERNAL_H */
