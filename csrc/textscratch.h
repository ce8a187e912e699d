/* The text pipeline's scratch: one set of buffers reused for every document
 * of a batch, used by the tokenizers (csrc/unicode.c, csrc/simhash.c) and the
 * pipelines built on them (simhash.c, signature.c, jaccard.c).
 *
 * Kept apart from both tokenizers so that they depend one way: simhash.c
 * calls the Unicode tokenizer, which needs only this scratch (it grows it).
 * Private: not in the cffi cdef.
 */
#ifndef SIMSTORE_TEXTSCRATCH_H
#define SIMSTORE_TEXTSCRATCH_H

#include <stddef.h>
#include <stdint.h>

/* Sized once for a batch by its longest document and reused for every
 * document; the Unicode tokenizer grows it when normalization lengthens a
 * document. */
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

/* Returns SS_OK, SS_EINVAL on reversed offsets or a document over 2 GiB,
 * SS_ENOMEM out of memory (nothing to free then). */
int ss__text_scratch_alloc(ss__text_scratch *s, const int64_t *offsets,
                           size_t ndocs);
void ss__text_scratch_free(ss__text_scratch *s);
/* Room for bytes of tokens in s->buf and for ntok tokens. Returns SS_OK,
 * SS_ENOMEM out of memory (s stays valid). */
int ss__text_scratch_reserve(ss__text_scratch *s, size_t bytes, size_t ntok);

/* spread[x] has byte lane j equal to bit j of x (256 entries): adding
 * spread[byte] to a word of 8 byte-counters counts 8 bit positions at once. */
void ss__make_spread(uint64_t *spread);

#endif /* SIMSTORE_TEXTSCRATCH_H */
