/* simstore C core: the hot loops, each one call over a whole array.
 *
 * Everything between the CDEF markers is fed to cffi verbatim, so it must
 * stay plain C declarations (no preprocessor lines but a #define of an integer
 * constant). Python reads the constants and enums declared here through cffi
 * (lib.SS_EINVAL, lib.SS_LMDB_PAGE_HEAD, ...), never a copy of them.
 */
#ifndef SIMSTORE_H
#define SIMSTORE_H

#include <stddef.h>
#include <stdint.h>

/* CDEF-BEGIN */

/* --- return codes ------------------------------------------------------ */
/* What every status-returning function of the core answers. A function that
 * counts (an int64_t "how many") returns the count, >= 0, or one of the
 * negative codes; the Python binding maps each code to one package exception
 * (simstore/native/core.py raise_for). ss_strerror names a code in words. */
enum ss_status {
    SS_OK = 0,
    SS_IDENTICAL = 1,   /* the batch search met two identical fingerprints */
    SS_ENOMEM = -1,     /* out of memory */
    SS_EINVAL = -2,     /* bad arguments */
    SS_ENEED = -3,      /* a run the call needs is not loaded (listed in its ss_need) */
    SS_EMAP = -4,       /* LMDB's map cannot answer: a page, node or record that does
                         * not check out, or not in the map (ask LMDB) */
    SS_EROOM = -5,      /* a table or buffer the caller gave has no room (grow it) */
    SS_EBADCODE = -6,   /* stored bytes are malformed (a set code, a short record) */
    SS_EOS = -7         /* the OS refused, or has no such call */
};
/* A code's meaning in a few words ("unknown status" for any other value). */
const char *ss_strerror(int rc);

/* --- murmur3 (bit-identical to mmh3.hash64 / mmh3.hash128) ------------ */
void ss_murmur3_x64_128(const uint8_t *key, size_t len, uint32_t seed,
                        uint64_t *out2);
/* The low halves of murmur3_x64_128 of n byte strings laid end to end in buf
 * (string i spans buf[ends[i-1] .. ends[i]), from 0 for the first) into out:
 * the ids' keys of a run-ids store. Returns SS_OK, or SS_EINVAL on bad arguments (ends
 * decreasing included). */
int ss_murmur3_many(const uint8_t *buf, const uint64_t *ends, size_t n, uint32_t seed,
                    uint64_t *out);

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
 * entries; out_offsets ndocs + 1 entries. Returns SS_OK, SS_EINVAL on bad
 * input, SS_ENOMEM out of memory. */
int ss_features(const uint8_t *text, const int64_t *offsets, size_t ndocs,
                int ngram, uint32_t seed, uint64_t *out_hashes,
                int64_t *out_offsets);
/* Fused pipeline: tokens -> shingles -> hashes -> weights -> simhash.
 * weighting: 0 = uniform over distinct features, 1 = term frequency,
 * 2 = 1 + ln(term frequency). out_nfeatures[d] receives the number of
 * distinct features (0 = the document has no token). Returns SS_OK, SS_EINVAL
 * on bad input, SS_ENOMEM out of memory. */
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
/* Pairs found by the batch search: arrays malloc'ed and grown by the C core,
 * released with ss_pairs_free (start from a zeroed struct). i < j. */
typedef struct {
    int64_t *i;
    int64_t *j;
    uint8_t *d;
    size_t n;
    size_t cap;
} ss_pairs;
/* The largest k the all-pairs search (ss_batch_pass) and a store's table
 * layout answer by index; a larger radius (up to 64) is a scan. Python reads
 * it as simstore.native.core.MAX_K. */
enum { SS_MAX_K = 16 };
/* Passes of the all-pairs search within k (0..SS_MAX_K) over n fingerprints
 * (n < 2**32). The 64 bits are split into nblocks (> k) near-equal
 * contiguous blocks; each combo has one bit per header block (nblocks - k of
 * them). Appends every pair within k whose lowest nblocks - k agreeing
 * blocks are exactly one of the combos: over all C(nblocks, k) combos each
 * pair comes out once. The fingerprints should be distinct: on meeting two
 * identical ones the search stops and returns SS_IDENTICAL (group the copies
 * with ss_dedupe and search the distinct values). Returns SS_OK,
 * SS_IDENTICAL, SS_ENOMEM, SS_EINVAL. */
int ss_batch_pass(const uint64_t *fps, size_t n, int k, int nblocks,
                  const uint64_t *combos, int ncombos, ss_pairs *out);
/* All pairs within k (0..64) by comparing every pair; part p of nparts
 * takes rows p, p + nparts, ... Returns SS_OK, SS_IDENTICAL identical
 * fingerprints met, SS_ENOMEM, SS_EINVAL. */
int ss_batch_brute(const uint64_t *fps, size_t n, int k, int part, int nparts,
                   ss_pairs *out);
void ss_pairs_free(ss_pairs *p);
/* Stable sort of fps by value: out_order[r] = index of the r-th smallest;
 * the distinct values go to out_uniq[0..*out_nuniq), the rank of each one's
 * first copy to out_starts (out_starts[*out_nuniq] = n). All outputs hold
 * n (+1) entries; n < 2**32. Returns SS_OK, SS_ENOMEM, SS_EINVAL bad n. */
int ss_dedupe(const uint64_t *fps, size_t n, uint64_t *out_uniq,
              uint32_t *out_order, uint32_t *out_starts, size_t *out_nuniq);
/* Connected components of the graph on 0..n-1 with edges (a[e], b[e]):
 * label[x] = smallest node of x's component. Returns SS_OK, SS_EINVAL on a node out
 * of range. */
int ss_components(size_t n, const int64_t *a, const int64_t *b, size_t m,
                  int64_t *label);
/* BATCH-END */

/* --- store query helpers (csrc/query.c) ------------------------------- */
/* QUERY-BEGIN */
/* One fingerprint permuted for each of ntables tables; the shift/width specs
 * are ntables rows of nblocks bytes each (see ss_permute_blocks). */
void ss_permute_tables(uint64_t q, int ntables, int nblocks,
                       const uint8_t *src_shift, const uint8_t *width,
                       const uint8_t *dst_shift, uint64_t *out);
/* The tail check of a store query, one call for all its candidates: keys
 * holds n 8-byte big-endian keys, key i read from table tables[i], whose
 * permuted query is the 8-byte big-endian qs_be[tables[i]] (the first
 * 8 * ntables bytes of ss_query_ranges' output). Indices i with
 * popcount(key ^ q) <= k into out_idx, distances into out_dist (both hold n
 * entries); returns how many. A table index >= ntables never matches. */
size_t ss_verify_candidates(const uint8_t *keys, const uint8_t *tables,
                            size_t n, const uint8_t *qs_be, int ntables,
                            int k, int64_t *out_idx, uint8_t *out_dist);
/* The key ranges a query probes. For each table t: qp = q permuted for t,
 * then for each of its nmasks[t] masks (masks concatenated table after table,
 * each an XOR of header bits already shifted left by tails[t]) the range
 * [lo, lo | (2**tails[t] - 1)] with lo = (qp with tail bits cleared) ^ mask.
 * out receives the ntables qp (8-byte big-endian each), then per table its
 * ranges sorted by lo, each as lo then hi (8-byte big-endian): it must hold
 * 8 * ntables + 16 * sum(nmasks) bytes. ntables <= 64, tails[t] <= 63.
 * Returns SS_OK, SS_ENOMEM, SS_EINVAL bad arguments. */
int ss_query_ranges(uint64_t q, int ntables, int nblocks,
                    const uint8_t *src_shift, const uint8_t *width,
                    const uint8_t *dst_shift, const uint8_t *tails,
                    const uint64_t *masks, const int32_t *nmasks,
                    uint8_t *out);
/* Rows of one permutation table, in key order: the fingerprints permuted
 * (see ss_permute_blocks) paired with their internal ids, stable-sorted by
 * permuted key (ids given ascending stay ascending under a key), into
 * out_keys and out_vals (n entries each, native byte order). Uses 16 * n
 * bytes of scratch. Returns SS_OK, SS_ENOMEM, SS_EINVAL bad arguments. */
int ss_sort_table(const uint64_t *fps, const uint64_t *iids, size_t n,
                  int nblocks, const uint8_t *src_shift, const uint8_t *width,
                  const uint8_t *dst_shift, uint64_t *out_keys,
                  uint64_t *out_vals);
/* QUERY-END */

/* --- probe engine over sorted runs read in place (csrc/probe.c) ------ */
/* PROBE-BEGIN */
/* One run: n keys and their values (internal doc ids), wherever they are
 * (a store's runs are read where LMDB maps them). keys are uint64 (kw 8) or
 * the low 32 bits of keys whose high 32 bits are `high` (kw 4); values are
 * uint64 (vw 8) or uint32 (vw 4), host order. A kw 8 run may carry a
 * directory (dir not NULL): 2**dbits + 1 entries (dbits 1..24), dir[b] the
 * first index whose key k has (k >> shift) - (keys[0] >> shift) >= b (shift
 * 0..63), dir[2**dbits] = n (see ss_run_dir); without one a probe
 * interpolates. With shift at most a table's tail bits, a probe's range
 * starts at its bucket's first key.
 *
 * A run of a sorted set may be not loaded yet: keys, vals and dir NULL and
 * n 0, kw the width its keys will have. A call that needs it reports it
 * (ss_need) instead of answering; the caller loads it (ss_runset_load) and
 * calls again. */
typedef struct {
    const void *keys;
    const void *vals;
    const uint32_t *dir;
    uint64_t high;
    uint64_t n;
    int32_t kw;
    int32_t vw;
    int32_t dbits;
    int32_t shift;
} ss_run;
/* A set of runs: table >= 0, one level of a sorted table: runs ascending and
 * disjoint, firsts[i] the first key of runs[i] (ascending); table -1, scan
 * runs of unpermuted fingerprints in any order (kw 8; firsts unused). */
typedef struct {
    const ss_run *runs;
    const uint64_t *firsts;
    /* NULL, or 2**tbits run indices (tbits 1..24): top[b] is the last run
     * whose first key is below b << tshift (0 if none), so finding a key's
     * run takes a step or two instead of a binary search; a key at or past
     * 2**(tbits + tshift) takes the last slot. tshift: 64 - tbits for keys
     * over all 64 bits, fewer for narrower ones (band keys: 36 bits) */
    const uint32_t *top;
    uint64_t nruns;
    int32_t table;
    int32_t tbits;
    int32_t checked; /* set by ss_runset_check: 1 ok, 2 ok and every key 64-bit */
    int32_t tshift;  /* 0..63, tbits + tshift <= 64 (with top) */
    /* 0..63: low header bits every probe of this set spans at least (a level
     * far smaller than its table: fewer, wider probes; see ss_probe) */
    int32_t span;
} ss_runset;
/* Check a set's runs once (widths, pointers, directories, the top index):
 * sets checked to 1 or 2 (see above) and SS_OK on success, 0 and SS_EINVAL
 * otherwise. The
 * queries then check only the set's own fields, not each run again. */
int ss_runset_check(ss_runset *s);
/* Load run r of a checked sorted set (not loaded yet) with *run: n >= 1, the
 * placeholder's key width, first key firsts[r]; checked like ss_runset_check.
 * Every copy of the set shares its runs array, so all of them see it.
 * Returns SS_OK, or SS_EINVAL (nothing changed). */
int ss_runset_load(ss_runset *s, size_t r, const ss_run *run);
/* The runs a call needed and found not loaded: a[i] = set index << 32 | run
 * index, each at most cap written, in no order (a run may repeat); n counts
 * them all (more than cap: load those, call again). */
typedef struct {
    uint64_t *a;
    size_t cap;
    size_t n;
} ss_need;
/* The probes of a query at one radius: ntables (1..64) permutations of
 * nblocks (1..64) blocks each (ntables rows of nblocks bytes, see
 * ss_permute_blocks), each table's tail bit count (64 - header bits, 0..63)
 * and its nmasks[t] distinct header XOR masks (concatenated table after
 * table, already shifted left by tails[t]; ascending keeps probes that share
 * pages together, any order gives the same answer). */
typedef struct {
    int32_t ntables;
    int32_t nblocks;
    const uint8_t *src_shift;
    const uint8_t *width;
    const uint8_t *dst_shift;
    const uint8_t *tails;
    const uint64_t *masks;
    const int32_t *nmasks;
    /* NULL, or one per mask: how many low header bits its probe spans (0..63,
     * tails[t] + span <= 64): the probe takes every header value that agrees
     * with q ^ m on the bits above them, one range where 2**span probes would
     * each find a few keys or none (sparse headers; a mask's group of near
     * values in a dense one). */
    const uint8_t *spans;
} ss_probe_plan;
/* Every value within k (0..64) of q over nsets run sets, in one call. A set
 * of table t is probed at each of t's masks m: the keys in [lo, lo |
 * tailmask], lo = (q permuted for t, tail cleared) ^ m (and its span's low
 * header bits cleared, tailmask then the bits below them; the span is the
 * mask's or the set's, the wider, the range capped at 64 bits, and a probe
 * whose range is the previous one of its set is skipped), that are
 * within k of the permuted q (kw 8 runs only). A scan set checks every key against q. The
 * distinct values (least distance of each), by distance then value, go to
 * out_vals and out_dist when all fit in cap. Returns how many there are (more
 * than cap: nothing written, call again with room for that many), SS_ENOMEM,
 * SS_EINVAL bad arguments, SS_ENEED a run it needs is not loaded (listed in
 * need; need NULL: SS_EINVAL). */
int64_t ss_probe(uint64_t q, int k, const ss_probe_plan *plan,
                 const ss_runset *sets, size_t nsets, uint64_t *out_vals,
                 uint8_t *out_dist, size_t cap, ss_need *need);
/* The directory of a run of n ascending keys (n >= 1) at a given shift, as
 * ss_run describes: dir holds 2**dbits + 1 entries (dbits 1..24), and the
 * run's buckets (keys[n-1] >> shift) - (keys[0] >> shift) must be below
 * 2**dbits. Returns SS_OK, or SS_EINVAL on bad arguments (keys not ascending
 * included). */
int ss_run_dir(const uint64_t *keys, size_t n, int dbits, int shift, uint32_t *dir);
/* The values of every key of the sorted sets (table >= 0) equal to one of
 * qs[0..nq): at most cap of them to out_vals, in set order then query order,
 * duplicates kept. Returns how many there are (more than cap: call again with
 * room for that many), SS_EINVAL bad arguments, SS_ENEED a run it needs is not loaded
 * (as ss_probe). */
int64_t ss_lookup(const ss_runset *sets, size_t nsets, const uint64_t *qs,
                  size_t nq, uint64_t *out_vals, size_t cap, ss_need *need);
/* PROBE-END */

/* --- similarity signatures (csrc/signature.c) ------------------------ */
/* SIGNATURE-BEGIN */
/* A signature of a set of 64-bit feature hashes (seed s, sketch_bits b,
 * bands x rows): one-permutation MinHash into K = 2b sketch bins and into
 * L = bands * rows band bins (bin minimum of the low 32 bits of
 * fmix64(h ^ salt), bin from the high 32), optimal densification of empty
 * bins, then an odd sketch of b bits over the K (bin, value) pairs (b / 64
 * uint64 words, bit p in word p / 64) and one key per band (murmur3_x64_128
 * low 64 bits of its rows values as little-endian uint32, seed s + 1 + band).
 * Valid shapes: b a multiple of 64 in 64..4096, bands 1..64, rows 1..32,
 * bands * rows <= 1024. The exact scheme is simstore/text/reference.py's.
 * Each call takes the densify tables of its shape: one of 2b bins and one of
 * bands * rows bins, both for seed s (a table of another size or seed is a
 * bad argument). */

/* The uint32 words of the densify table of nbins bins, 0 if nbins is not
 * 1..8192. */
size_t ss_densify_table_words(size_t nbins);
/* The densify table of nbins bins (1..8192) for seed into out (of
 * ss_densify_table_words(nbins) words): which bins' tries reach each bin.
 * It depends on nothing else, so callers build it once per shape. Returns SS_OK,
 * SS_EINVAL bad arguments. */
int ss_densify_table(uint32_t seed, size_t nbins, uint32_t *out);

/* Signatures of given hash sets: set d is hashes[offsets[d] .. offsets[d+1])
 * (at least one hash; repeats do not matter). out_sketch holds ndocs rows of
 * sketch_bits / 64 words, out_bands ndocs rows of bands keys. Returns SS_OK,
 * SS_ENOMEM, SS_EINVAL bad arguments (shape, or an empty or reversed set). */
int ss_signature_hashes(const uint64_t *hashes, const int64_t *offsets,
                        size_t ndocs, uint32_t seed, int sketch_bits,
                        int bands, int rows, const uint32_t *sketch_table,
                        const uint32_t *band_table, uint64_t *out_sketch,
                        uint64_t *out_bands);
/* Fused pipeline: ss_fingerprint_texts (fingerprints into out_fp, distinct
 * feature counts into out_nfeatures) plus the signature of each document's
 * distinct features. A document without a token (out_nfeatures[d] == 0) gets
 * fingerprint 0 and zeroed sketch and band rows, for the caller to fill.
 * Returns SS_OK, SS_ENOMEM, SS_EINVAL bad arguments. */
int ss_signature_texts(const uint8_t *text, const int64_t *offsets,
                       size_t ndocs, int ngram, uint32_t seed, int weighting,
                       int sketch_bits, int bands, int rows,
                       const uint32_t *sketch_table, const uint32_t *band_table,
                       uint64_t *out_fp, uint64_t *out_sketch,
                       uint64_t *out_bands, int64_t *out_nfeatures);
/* out[i] = popcount(q XOR sketches[i]) over words uint64 words per sketch
 * (1..64). Returns SS_OK, SS_EINVAL bad arguments. */
int ss_sketch_distance_one(const uint64_t *q, const uint64_t *sketches,
                           size_t n, int words, int32_t *out);
/* out[i] = popcount(a[i] XOR b[i]) for two n x words arrays (words 1..64).
 * Returns SS_OK, SS_EINVAL bad arguments. */
int ss_sketch_distance_pairwise(const uint64_t *a, const uint64_t *b,
                                size_t n, int words, int32_t *out);
/* SIGNATURE-END */

/* --- Unicode text pipeline (csrc/unicode.c) ------------------------ */
/* UNICODE-BEGIN */
/* The C tokenizer of the scheme for any script: UTF-8 text (lone surrogates
 * in their 3-byte form), NFKC, str.lower (final sigma included), tokens of
 * letters/digits of any script, each Han/Kana character a token, exactly as
 * simstore/text/fingerprinting.py's tokens(); all-ASCII documents take the
 * byte tokenizer. Its tables are generated at build time from the building
 * Python's unicodedata: ss_unicode_tables_id names them ("unicode <version>;
 * rules <digest>", simstore/text/rules.py's tables_id), and callers use these
 * functions only when their Python gives the same id. */
const char *ss_unicode_tables_id(void);
/* ss_fingerprint_texts and ss_signature_texts on UTF-8 text as it is. */
int ss_fingerprint_utf8(const uint8_t *text, const int64_t *offsets,
                        size_t ndocs, int ngram, uint32_t seed, int weighting,
                        uint64_t *out, int64_t *out_nfeatures);
int ss_signature_utf8(const uint8_t *text, const int64_t *offsets,
                      size_t ndocs, int ngram, uint32_t seed, int weighting,
                      int sketch_bits, int bands, int rows,
                      const uint32_t *sketch_table, const uint32_t *band_table,
                      uint64_t *out_fp, uint64_t *out_sketch,
                      uint64_t *out_bands, int64_t *out_nfeatures);
/* For inspection and tests: the NFKC form of one UTF-8 text, and its tokens
 * joined by one space, into out (UTF-8). Return the length (written only
 * when it is <= cap: call again with more room), SS_ENOMEM. */
int64_t ss_unicode_nfkc(const uint8_t *text, size_t len, uint8_t *out,
                        size_t cap);
int64_t ss_unicode_tokens(const uint8_t *text, size_t len, uint8_t *out,
                          size_t cap);
/* UNICODE-END */

/* --- exact Jaccard of shingle-hash sets (csrc/jaccard.c) ------------- */
/* JACCARD-BEGIN */
/* Each document's set of distinct feature hashes (the shingles of
 * ss_fingerprint_texts, or of ss_fingerprint_utf8 when unicode is nonzero:
 * same tokens, ngram and seed), sorted ascending: document d's set is
 * out_hashes[out_offsets[d] .. out_offsets[d+1]) (empty for a document
 * without a token). out_offsets gets ndocs + 1 entries; the hashes are written
 * only when all of them fit in cap. Returns how many hashes there are (more
 * than cap: call again with room for that many), SS_ENOMEM, SS_EINVAL bad
 * arguments. */
int64_t ss_shingle_sets(const uint8_t *text, const int64_t *offsets,
                        size_t ndocs, int ngram, uint32_t seed, int unicode,
                        uint64_t *out_hashes, size_t cap,
                        int64_t *out_offsets);
/* Exact Jaccard |A & B| / |A | B| of npairs pairs of ascending sets: pair p
 * is set pi[p] of collection a (ha, offa: na sets as above) with set pj[p] of
 * collection b (which may be a itself), into out[p]; two empty sets give 1.
 * With threshold t in (0, 1], a pair that provably has J < t (its sizes, or
 * its merge, rule it out) may get -1 instead of its value; t = 0 measures
 * every pair. Returns SS_OK, SS_EINVAL bad arguments (an index out of range, reversed
 * offsets, t outside 0..1). */
int ss_jaccard_pairs(const uint64_t *ha, const int64_t *offa, size_t na,
                     const uint64_t *hb, const int64_t *offb, size_t nb,
                     const int64_t *pi, const int64_t *pj, size_t npairs,
                     double threshold, double *out);
/* A store's compact form of sets (ascending, distinct): set d of (hashes,
 * offsets) becomes bytes out[out_offsets[d] .. out_offsets[d+1]) (a version
 * byte, the size, Golomb-Rice coded gaps: csrc/jaccard.c SETCODE), written
 * only while they fit in cap. Returns the bytes of all codes (more than cap:
 * call again with room), SS_EINVAL if a set is not strictly ascending. */
int64_t ss_shingles_encode(const uint64_t *hashes, const int64_t *offsets,
                           size_t nsets, uint8_t *out, size_t cap,
                           int64_t *out_offsets);
/* The sets of ncodes codes (code d: codes[offsets[d] .. offsets[d+1])) into
 * out, set d at out[out_offsets[d] .. out_offsets[d+1]) (out_offsets: ncodes +
 * 1 entries, always filled). Returns how many hashes there are, written only
 * when they fit in cap (call with cap 0 to size out); SS_EBADCODE when code *bad
 * is malformed (unknown version, truncated, trailing bytes, not ascending), SS_EINVAL
 * reversed offsets. */
int64_t ss_shingles_decode(const uint8_t *codes, const int64_t *offsets,
                           size_t ncodes, uint64_t *out, size_t cap,
                           int64_t *out_offsets, int64_t *bad);
/* One set's code a part at a time (a long text's: its set handed back as it
 * is coded, its code compared as it is read). The bytes are those of
 * ss_shingles_encode. */
typedef struct {
    uint64_t pos;  /* bytes of the code written */
    uint64_t acc;  /* bits not yet written, the low nacc of them */
    uint64_t done; /* values written */
    uint64_t last; /* the last of them */
    int nacc;
    int k;         /* the Rice parameter */
} ss_setcode_writer;
/* Plans the code of the ascending set a[0..n) into *w and writes its header
 * (at most 12 bytes) to head. Returns the code's size in bytes, SS_EINVAL if a
 * is not strictly ascending. */
int64_t ss_setcode_begin(const uint64_t *a, size_t n, ss_setcode_writer *w,
                         uint8_t *head);
/* Codes the next m values a[0..m) of the set begun, into out (the whole code's
 * buffer: written from w->pos on, at most 14 bytes a value); end: a[m - 1] is
 * the set's last value (the last byte is padded). Returns the bytes written
 * so far. */
int64_t ss_setcode_put(ss_setcode_writer *w, const uint64_t *a, size_t m,
                       uint8_t *out, int end);
typedef struct {
    uint64_t n;     /* values in the set */
    uint64_t read;  /* values read */
    uint64_t value; /* the last of them */
    uint64_t acc;   /* bits taken from the bytes, not yet read: the low nacc */
    int nacc;
    int k;          /* the Rice parameter */
    int held;       /* value is read but not yet compared */
} ss_setcode_reader;
/* Starts reading a code from its first bytes in[0..len) (its header whole:
 * 12 bytes, or the whole code). Returns the bytes the header took,
 * SS_EBADCODE (an unknown version, a bad size or Rice parameter). */
int64_t ss_setcode_open(ss_setcode_reader *r, const uint8_t *in, size_t len);
/* Adds to *common the values of two codes' sets they share, reading code a
 * from ain[*apos..alen) and code b from bin[*bpos..blen) (*apos, *bpos move
 * on). Returns 0 once either set is read (the count is whole), 1 when a needs
 * more bytes, 2 when b does (give the bytes not taken again, followed by the
 * next ones), SS_EBADCODE. */
int ss_setcode_common(ss_setcode_reader *a, const uint8_t *ain, size_t alen,
                      size_t *apos, ss_setcode_reader *b, const uint8_t *bin,
                      size_t blen, size_t *bpos, uint64_t *common);
/* Reads (and checks) the rest of r's values from in[*pos..len): 0 when all
 * are read, 1 when more bytes are needed, SS_EBADCODE. */
int ss_setcode_skip(ss_setcode_reader *r, const uint8_t *in, size_t len,
                    size_t *pos);
/* SS_OK when r has read all its values and `left`, the bytes of its code
 * not taken, is 0 and the bits left over are zeros (the padding), else
 * SS_EBADCODE. */
int ss_setcode_done(const ss_setcode_reader *r, size_t left);
/* JACCARD-END */

/* --- values in LMDB's map (csrc/lmdbmap.c) ----------------------------- */
/* Where the value of the record whose key is key[0..klen) lies in an LMDB
 * map of `pages` pages of psize bytes at map: key must be a buffer a read
 * transaction returned for a cursor's key (it points into the record's leaf
 * page). For a value on overflow pages, returns its byte offset in the map
 * and its size (*out_size), having read only the leaf page and the value's
 * first page; SS_EMAP when the key is not in the map, its node holds its
 * value inline or anything read does not check out (the caller then gets the
 * value as LMDB returns it); SS_EINVAL bad arguments. */
int64_t ss_map_value(const uint8_t *map, uint64_t pages, uint32_t psize,
                     const uint8_t *key, size_t klen, uint64_t *out_size);
/* Where the map lies (*out_map), from a record LMDB returned in place: key and
 * value buffers of one read transaction (value[0..vlen) on overflow pages,
 * as the value's node and first page confirm). Returns SS_OK, SS_EMAP when they
 * do not check out (an inline value, a copy), SS_EINVAL bad arguments. */
int ss_map_base(const uint8_t *key, size_t klen, const uint8_t *value, size_t vlen,
                uint32_t psize, uintptr_t *out_map);
/* Ask the OS to back the mapping [start, start + size) (page-aligned: a whole
 * mapping the caller found, LMDB's map) with huge pages where it reads the
 * file in (Linux MADV_HUGEPAGE; it changes no byte). Returns SS_OK, SS_EOS
 * when the OS refuses or has no such advice, SS_EINVAL bad arguments. */
int ss_map_advise_huge(uintptr_t start, uint64_t size);
/* Let go of the pages this process has mapped in [start, start + size) (a
 * whole mapping the caller found, LMDB's map, which LMDB only reads: no write
 * goes through it): they leave its resident set and stay in the page cache, a
 * later read maps them again with the same bytes (Linux MADV_DONTNEED). Returns
 * SS_OK, SS_EOS when the OS refuses or has no such advice, SS_EINVAL bad
 * arguments. */
int ss_map_release(uintptr_t start, uint64_t size);
/* LMDB 0.9's file layout, as csrc/lmdbmap.c reads it (simstore/store/check/
 * lmdbfile.py parses the same file; tests/native/test_c_api.py pins the two):
 * a page header of SS_LMDB_PAGE_HEAD bytes (page number 8, pad 2, flags 2,
 * then lower and upper bounds 2 + 2, or an overflow page's page count 4); a
 * node header of SS_LMDB_NODE_HEAD bytes (data size low / high halves 2 + 2,
 * flags 2, key size 2), the key, then the value or (SS_LMDB_F_BIGDATA) its
 * first overflow page number (8); a named database's record in the main
 * database of SS_LMDB_DB_RECORD bytes, its depth (2) at SS_LMDB_DB_DEPTH and
 * root page (8) at SS_LMDB_DB_ROOT, SS_LMDB_NO_ROOT for an empty tree. */
enum {
    SS_LMDB_PAGE_HEAD = 16,
    SS_LMDB_NODE_HEAD = 8,
    SS_LMDB_P_BRANCH = 0x01,
    SS_LMDB_P_LEAF = 0x02,
    SS_LMDB_P_OVERFLOW = 0x04,
    SS_LMDB_P_LEAF2 = 0x20,
    SS_LMDB_F_BIGDATA = 0x01,
    SS_LMDB_MAX_DEPTH = 32,
    SS_LMDB_DB_RECORD = 48,
    SS_LMDB_DB_DEPTH = 6,
    SS_LMDB_DB_ROOT = 40
};
#define SS_LMDB_NO_ROOT 0xFFFFFFFFFFFFFFFFULL
/* One B-tree of an LMDB map of `pages` pages of psize bytes at map, walked
 * from its root page down `depth` levels (depth 0: an empty tree). Only pages
 * of one snapshot may be read: a read transaction's, or a write transaction's
 * before it writes that database. */
typedef struct {
    const uint8_t *map;
    uint64_t pages;
    uint64_t root;
    uint32_t psize;
    uint32_t depth;
} ss_map_tree;
/* The tree of a named database, from its record in the main database
 * (rec[0..len), SS_LMDB_DB_RECORD bytes): root and depth into *tree (depth 0
 * for an empty tree), the other fields left as they are. Returns SS_OK,
 * SS_EMAP when the record does not read as one, SS_EINVAL bad arguments. */
int ss_map_tree_of_record(const uint8_t *rec, size_t len, ss_map_tree *tree);
/* Where the values of n 8-byte keys (keys[i], compared as big-endian bytes)
 * lie in a tree: out_off[i] the value's byte offset in the map and out_len[i]
 * its size, or out_off[i] 0 when the tree has no such key. Every page read is
 * checked (number, kind, bounds, each node inside its page); returns SS_OK,
 * SS_EMAP when one does not check out or the tree names a page past `pages`
 * (the caller asks LMDB), SS_EINVAL bad arguments. */
int ss_map_lookup(const ss_map_tree *tree, const uint64_t *keys, size_t n,
                  int64_t *out_off, uint32_t *out_len);
/* Where the map lies (*out_map), from a buffer a read transaction returned
 * inside a leaf page (a cursor's key): the page's header names its number.
 * Returns SS_OK, SS_EMAP when the page does not read as a leaf page,
 * SS_EINVAL bad arguments. */
int ss_map_base_of_page(const uint8_t *at, uint32_t psize, uintptr_t *out_map);

/* --- a multimap of 64-bit keys (csrc/keytable.c) ------------------------ */
/* The key of an empty slot (no stored key may be it). */
#define SS_KEY_EMPTY 0xFFFFFFFFFFFFFFFFULL
/* Add n (key, value) pairs to the table of cap slots (a power of two; every
 * slot of a new table holds SS_KEY_EMPTY) holding `used` pairs: pair i is
 * (ks[i], vs[i / per]), so one value may go with per keys. Returns the pairs
 * held now, SS_EROOM when they would fill more than half the slots (nothing
 * is added: the caller moves to a table twice the size), SS_EINVAL bad arguments or a
 * key SS_KEY_EMPTY. */
int64_t ss_keytable_add(uint64_t *keys, uint64_t *vals, size_t cap, size_t used,
                        const uint64_t *ks, size_t n, const uint64_t *vs, size_t per);
/* ss_keytable_add of one doc's band entries, all with the value val: keys
 * band << 32 | key32 of its nbands (0..64) 4-byte big-endian keys at be32 (as
 * a docs record holds them). Same returns. */
int64_t ss_keytable_add_bands(uint64_t *keys, uint64_t *vals, size_t cap, size_t used,
                              const uint8_t *be32, size_t nbands, uint64_t val);
/* The values of every pair whose key is one of qs[0..nq), into out while they
 * fit in outcap; returns how many there are, SS_EINVAL bad arguments. */
int64_t ss_keytable_find(const uint64_t *keys, const uint64_t *vals, size_t cap,
                         const uint64_t *qs, size_t nq, uint64_t *out, size_t outcap);

/* --- one document at a time (csrc/single.c) --------------------------- */
/* SINGLE-BEGIN */
/* ss_fingerprint_texts (unicode 0) or ss_fingerprint_utf8 (unicode nonzero)
 * of the one document text[0..len): out[0] its fingerprint, out[1] its
 * distinct feature count. Same returns. */
int ss_fingerprint_one(const uint8_t *text, size_t len, int ngram,
                       uint32_t seed, int weighting, int unicode,
                       uint64_t *out);
/* ss_signature_texts / ss_signature_utf8 of the one document text[0..len),
 * packed into out (2 + sketch_bits / 64 + bands words): the fingerprint, the
 * sketch words, the band keys, then the distinct feature count. Same
 * returns. */
int ss_signature_one(const uint8_t *text, size_t len, int ngram, uint32_t seed,
                     int weighting, int unicode, int sketch_bits, int bands,
                     int rows, const uint32_t *sketch_table,
                     const uint32_t *band_table, uint64_t *out);
/* ss_shingle_sets of the one document text[0..len): its set, ascending, in
 * out_hashes when it fits in cap. Same returns. */
int64_t ss_shingle_set_one(const uint8_t *text, size_t len, int ngram,
                           uint32_t seed, int unicode, uint64_t *out_hashes,
                           size_t cap);
/* Where a docs record keeps what a similarity lookup reads, as the store's
 * record codec (simstore/store/format.py RecordCodec) lays it out: byte 0 the
 * tag, the fingerprint (8 bytes big-endian) at fp_start, the sketch (words
 * little-endian uint64 words, 1..64) at sketch_start, the time of storage
 * (8 bytes big-endian) at at_start, the encoded id from id_start on. */
typedef struct {
    size_t fp_start;
    size_t sketch_start;
    size_t at_start;
    size_t id_start;
    int32_t tag;
    int32_t words;
} ss_docs_layout;
/* The sketch check of a similarity lookup: n records laid end to end in recs
 * (record i ends at ends[i], from 0 for the first), each holding a sketch as
 * layout says (only its sketch_start and words are read). Indices i whose
 * sketch is within maxd bits of q into out_idx, the distances into out_dist
 * (both hold n entries); returns how many, SS_EINVAL bad arguments, or
 * SS_EBADCODE when a record is too short to hold a sketch (*out_bad its
 * index). */
int64_t ss_sketch_hits(const uint64_t *q, const ss_docs_layout *layout,
                       const uint8_t *recs, const int64_t *ends, size_t n, int maxd,
                       int64_t *out_idx, int32_t *out_dist, int64_t *out_bad);
/* A similarity query: a signature's nbands (1..64) band keys and its sketch
 * (layout.words words), the most sketch bits it may differ by, and since: the
 * time of storage (ms) a hit's record must have at least, or -1 for any. */
typedef struct {
    const uint64_t *bands;
    const uint64_t *sketch;
    size_t nbands;
    int64_t since;
    int32_t maxd;
} ss_similar_query;
/* A key table (csrc/keytable.c) read by a lookup: cap slots (0: no table). */
typedef struct {
    const uint64_t *keys;
    const uint64_t *vals;
    size_t cap;
} ss_keytable_view;
/* The room of a similarity lookup: cands for cap candidates (*ncands their
 * count with repeats, set by the call) and hits for cap hits of 5 words. */
typedef struct {
    uint64_t *cands;
    uint64_t *hits;
    size_t cap;
    int64_t ncands;
} ss_similar_room;
/* A similarity lookup of one signature in one call. Its candidates: the
 * values of the query's band entries (band << 32 | the low 32 bits of
 * bands[band]) in the run sets (as ss_lookup, which may return SS_ENEED and
 * fill need) and in the recent docs' key table (ss_keytable_find), into
 * room->cands (room->ncands their count with repeats; SS_EROOM when that
 * passes room->cap). Each distinct one's docs record is found by ss_map_lookup
 * in the tree, skipped when absent (a removed doc) or, with since >= 0,
 * stored before since; each must start with the layout's tag and be longer
 * than its id_start. Those whose sketch is within maxd bits of the query's: 5
 * words each in room->hits: internal id, distance, the record's offset in the
 * map and its size, and the fingerprint, in internal id order. Returns how
 * many; SS_EINVAL bad arguments, SS_ENEED runs needed, SS_EMAP when the map
 * cannot answer (a page or record that does not check out: ask LMDB),
 * SS_EROOM candidates past the room. */
int64_t ss_similar_one(const ss_runset *sets, size_t nsets, ss_need *need,
                       const ss_keytable_view *recent, const ss_map_tree *tree,
                       const ss_docs_layout *layout, const ss_similar_query *query,
                       ss_similar_room *room);
/* SINGLE-END */
/* CDEF-END */

#endif /* SIMSTORE_H */
