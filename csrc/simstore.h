/* simstore C core: the hot loops, each one call over a whole array.
 *
 * Everything between the CDEF markers is fed to cffi verbatim, so it must
 * stay plain C declarations (no preprocessor lines).
 */
#ifndef SIMSTORE_H
#define SIMSTORE_H

#include <stddef.h>
#include <stdint.h>

/* CDEF-BEGIN */

/* --- murmur3 (bit-identical to mmh3.hash64 / mmh3.hash128) ------------ */
void ss_murmur3_x64_128(const uint8_t *key, size_t len, uint32_t seed,
                        uint64_t *out2);

/* --- Hamming distance ------------------------------------------------- */
/* Distances of q to each of fps[0..n) into out[0..n). */
void ss_hamming_one(uint64_t q, const uint64_t *fps, size_t n, uint8_t *out);
/* out[i] = popcount(a[i] ^ b[i]). */
void ss_hamming_pairwise(const uint64_t *a, const uint64_t *b, size_t n,
                         uint8_t *out);
/* Indices i with popcount(q ^ fps[i]) <= k into out_idx (and their
 * distances into out_dist, which may be NULL); returns how many. out_idx
 * must hold n entries. */
size_t ss_hamming_within(uint64_t q, const uint64_t *fps, size_t n, int k,
                         int64_t *out_idx, uint8_t *out_dist);

/* --- simhash accumulation --------------------------------------------- */
/* One fingerprint from n feature hashes; weights may be NULL (all 1).
 * Bit b is 1 iff the sum of +w (bit set) / -w (bit clear) is > 0. */
uint64_t ss_simhash(const uint64_t *hashes, const double *weights, size_t n);
/* Document d owns hashes[offsets[d] .. offsets[d+1]); weights may be NULL. */
void ss_simhash_batch(const uint64_t *hashes, const double *weights,
                      const int64_t *offsets, size_t ndocs, uint64_t *out);

/* --- text features ---------------------------------------------------- */
/* Tokenizing used by the fused pipeline: a token is a maximal run of ASCII
 * letters/digits or bytes >= 0x80; ASCII letters are lower-cased; all other
 * bytes separate tokens. Features are word n-gram shingles (tokens joined by
 * one space; a document with 1..ngram-1 tokens gives one shingle of all of
 * them) hashed with murmur3_x64_128 low 64 bits.
 *
 * Document d is text[offsets[d] .. offsets[d+1]). */

/* Number of tokens of each document into out_ntokens. */
void ss_count_tokens(const uint8_t *text, const int64_t *offsets,
                     size_t ndocs, int64_t *out_ntokens);
/* Feature hashes (every occurrence, in text order) of each document.
 * out_hashes must hold sum(max(ntokens - ngram + 1, min(ntokens, 1)))
 * entries; out_offsets ndocs + 1 entries. Returns 0, or -1 on bad input
 * or out of memory. */
int ss_features(const uint8_t *text, const int64_t *offsets, size_t ndocs,
                int ngram, uint32_t seed, uint64_t *out_hashes,
                int64_t *out_offsets);
/* Fused pipeline: tokens -> shingles -> hashes -> weights -> simhash.
 * weighting: 0 = uniform over distinct features, 1 = term frequency,
 * 2 = 1 + ln(term frequency). out_nfeatures[d] receives the number of
 * distinct features (0 = the document has no token). Returns 0, or -1 on
 * bad input or out of memory. */
int ss_fingerprint_texts(const uint8_t *text, const int64_t *offsets,
                         size_t ndocs, int ngram, uint32_t seed,
                         int weighting, uint64_t *out,
                         int64_t *out_nfeatures);

/* --- block permutation ------------------------------------------------ */
/* out[i] = OR over blocks j of ((in[i] >> src_shift[j]) & mask(width[j]))
 *          << dst_shift[j]. The inverse permutation swaps src and dst. */
void ss_permute_blocks(const uint64_t *in, size_t n, int nblocks,
                       const uint8_t *src_shift, const uint8_t *width,
                       const uint8_t *dst_shift, uint64_t *out);

/* --- batch all-pairs search (csrc/batch.c) --------------------------- */
/* BATCH-BEGIN */
/* BATCH-END */

/* --- store query helpers (csrc/query.c) ------------------------------- */
/* QUERY-BEGIN */
/* QUERY-END */

/* CDEF-END */

#endif /* SIMSTORE_H */
