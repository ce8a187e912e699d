"""How well does "Hamming <= k" find "Jaccard >= t"? Exact all-pairs evaluation of simstore.

Corpus: real text found on this Debian machine, written by nobody on the team
(see tools/_corpus.py): /usr/share/doc/*/copyright, /usr/share/common-licenses/*,
LICENSE/COPYING/NOTICE files in the *.dist-info of the site-packages under
/root/.pyenv and /usr/lib/python3*, and a seeded subsample of
/usr/share/man/man1/*.gz (roff stripped crudely) filling up to --max-docs.
Documents with fewer than --min-tokens tokens and exact duplicates (identical
token sequences) are dropped. Missing sources are reported and skipped.

Truth: Jaccard similarity of word-3-shingle sets (tokens of simstore.tokens),
computed for ALL pairs as a sparse product X @ X.T of the doc x shingle matrix.

Predictor: Hamming distance <= k (k = 0..12) of 64-bit fingerprints from each
pipeline: simstore ngram 1..5 x weighting uniform/tf/logtf, the PyPI `simhash`
package over word 3-shingles (skipped with a warning if it does not import),
and simstore with an IDF table learnt on a held-out half of the corpus (scored
on the other half only, beside the same pipeline without IDF on that half).
Also: each simstore pipeline under several murmur3 seeds (to show the noise),
and the expected score of an ideal 64-bit simhash of the 3-shingle sets
(Hamming ~ Binomial(64, theta/pi)), the ceiling of the estimator.

Similarity mode (--part similarity, also in the default --part all; see
tools/quality/similarity.py): simstore.find_similar at Jaccard thresholds 0.95, 0.9, 0.8
per sketch size (256..640 bits, 16 bands x 8 rows), with the rule "estimate >= t"
and "estimate >= t + 0.005", against datasketch MinHashLSH (128 perms, its own
candidates, MinHash.jaccard >= t) and the default simhash pipeline's best k,
over hash seeds 0..N-1; precision, recall, F1, stage-1 recall, candidates per
document, bytes per document, MB/s; and the sketch size the numbers support.

Exact rule (--part exact, its own run; see tools/quality/exact.py): find_similar with
the texts (candidates widened near t, exact Jaccard decides) against the sketch rule and
datasketch MinHashLSH in the same run: precision, recall, candidate recall, seconds.

Run:  python -m tools.quality --json /tmp/quality.json
(needs scipy, from the [bench] extra, and datasketch for the peer; results in
docs/quality.md)
"""
