/* Unicode text to the scheme's tokens: NFKC, str.lower, letters and digits of
 * any script, every Han/Kana character a token by itself.
 *
 * Every property comes from unicode_tables.h, generated at build time from
 * the building Python's unicodedata (csrc/gen_unicode.py), so this file holds
 * algorithms only. Two passes per document:
 *
 * 1. NFKC into s->cps. A QUICK code point (a starter NFKC leaves alone and
 *    nothing before it composes with) is copied. Any other starts a stretch
 *    that runs back to the previous code point (a QUICK starter that may
 *    compose with what follows) and on to the next QUICK one: the stretch is
 *    fully decomposed, put in canonical order and composed (UAX #15), which
 *    is what NFKC does to it inside the whole text.
 * 2. Lower-case and tokenize s->cps into s->buf. Capital sigma becomes final
 *    sigma by str.lower's rule (after a cased letter and not before one,
 *    case-ignorable characters skipped both ways), which needs the whole
 *    normalized text, hence two passes.
 */
#include <stdlib.h>
#include <string.h>

#include "_internal.h"
#include "unicode_tables.h"

#define CP_MASK 0x1fffffu
#define CLS_WORD 1
#define CLS_HAN 2
#define SBASE 0xac00u
#define LBASE 0x1100u
#define VBASE 0x1161u
#define TBASE 0x11a7u
#define LCOUNT 19u
#define VCOUNT 21u
#define TCOUNT 28u
#define SCOUNT (LCOUNT * VCOUNT * TCOUNT)
#define CAPITAL_SIGMA 0x3a3u
#define FINAL_SIGMA 0x3c2u
#define NO_STARTER ((size_t)-1)

const char *ss_unicode_tables_id(void) { return SS__U_TABLES_ID; }

static inline const ss__urec *urec(uint32_t c) {
    uint32_t block = ss__u_stage1[c >> SS__U_SHIFT];
    return &ss__u_recs[ss__u_stage2[(block << SS__U_SHIFT) |
                                    (c & ((1u << SS__U_SHIFT) - 1))]];
}

static inline int is_cont(uint8_t b) { return (b & 0xc0) == 0x80; }

/* The code point at src[*i] (i < len), advancing *i. Python's UTF-8 with
 * lone surrogates as 3-byte forms decodes exactly; any other malformed byte
 * reads as U+FFFD and advances one byte (never past len). */
static inline uint32_t decode(const uint8_t *src, size_t len, size_t *i) {
    size_t p = *i;
    uint8_t b = src[p];
    if (b < 0x80) {
        *i = p + 1;
        return b;
    }
    if (b >= 0xc2 && b < 0xe0 && p + 1 < len && is_cont(src[p + 1])) {
        *i = p + 2;
        return ((uint32_t)(b & 0x1f) << 6) | (src[p + 1] & 0x3fu);
    }
    if (b >= 0xe0 && b < 0xf0 && p + 2 < len && is_cont(src[p + 1]) &&
        is_cont(src[p + 2])) {
        uint32_t c = ((uint32_t)(b & 0x0f) << 12) | ((src[p + 1] & 0x3fu) << 6) |
                     (src[p + 2] & 0x3fu);
        if (c >= 0x800) {
            *i = p + 3;
            return c;
        }
    }
    if (b >= 0xf0 && b < 0xf5 && p + 3 < len && is_cont(src[p + 1]) &&
        is_cont(src[p + 2]) && is_cont(src[p + 3])) {
        uint32_t c = ((uint32_t)(b & 0x07) << 18) | ((src[p + 1] & 0x3fu) << 12) |
                     ((src[p + 2] & 0x3fu) << 6) | (src[p + 3] & 0x3fu);
        if (c >= 0x10000 && c < 0x110000) {
            *i = p + 4;
            return c;
        }
    }
    *i = p + 1;
    return 0xfffd;
}

static inline size_t encode(uint32_t c, uint8_t *out) {
    if (c < 0x80) {
        out[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (uint8_t)(0xc0 | (c >> 6));
        out[1] = (uint8_t)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (uint8_t)(0xe0 | (c >> 12));
        out[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (uint8_t)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (uint8_t)(0xf0 | (c >> 18));
    out[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3f));
    out[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
    out[3] = (uint8_t)(0x80 | (c & 0x3f));
    return 4;
}

/* *p grown to hold at least want uint32 entries. */
static int reserve32(uint32_t **p, size_t *cap, size_t want) {
    if (want <= *cap) return 0;
    size_t n = *cap ? *cap : 64;
    while (n < want) n *= 2;
    uint32_t *q = realloc(*p, n * sizeof(uint32_t));
    if (!q) return SS_ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* ---- pass 1: NFKC ------------------------------------------------------ */

/* Appends the full decomposition of c to seg (entries cp | ccc << 24); seg
 * has room for SS__U_MAX_DECOMP more. */
static size_t decompose(uint32_t c, uint32_t *seg, size_t n) {
    if (c - SBASE < SCOUNT) {
        uint32_t si = c - SBASE;
        seg[n++] = LBASE + si / (VCOUNT * TCOUNT);
        seg[n++] = VBASE + (si % (VCOUNT * TCOUNT)) / TCOUNT;
        if (si % TCOUNT) seg[n++] = TBASE + si % TCOUNT;
        return n;
    }
    const ss__urec *r = urec(c);
    if (r->decomp) {
        const uint32_t *d = ss__u_pool + r->decomp;
        for (uint32_t k = 1; k <= d[0]; k++) seg[n++] = d[k];
        return n;
    }
    seg[n++] = c | ((uint32_t)r->ccc << 24);
    return n;
}

/* Canonical order: a stable sort of each run of non-starters by class. */
static void reorder(uint32_t *seg, size_t n) {
    for (size_t k = 1; k < n; k++) {
        uint32_t cur = seg[k], cc = cur >> 24;
        if (cc == 0) continue;
        size_t m = k;
        while (m > 0 && (seg[m - 1] >> 24) > cc) {
            seg[m] = seg[m - 1];
            m--;
        }
        seg[m] = cur;
    }
}

/* The primary composite of (a, b), or 0. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a - LBASE < LCOUNT && b - VBASE < VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a - SBASE < SCOUNT && (a - SBASE) % TCOUNT == 0 && b - TBASE - 1 < TCOUNT - 1)
        return a + (b - TBASE);
    uint64_t key = ((uint64_t)a << 21) | b;
    size_t lo = 0, hi = SS__U_NPAIRS;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ss__u_pair_keys[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo < SS__U_NPAIRS && ss__u_pair_keys[lo] == key ? ss__u_pair_vals[lo] : 0;
}

/* Canonical composition of seg[0..n) in place (UAX #15); returns the new
 * length. Composites are starters. */
static size_t compose(uint32_t *seg, size_t n) {
    if (n == 0) return 0;
    size_t starter = seg[0] >> 24 ? NO_STARTER : 0, out = 1;
    uint32_t last_cc = seg[0] >> 24 ? 256 : 0;
    for (size_t k = 1; k < n; k++) {
        uint32_t ch = seg[k] & CP_MASK, cc = seg[k] >> 24;
        if (starter != NO_STARTER && (last_cc < cc || last_cc == 0)) {
            uint32_t comp = compose_pair(seg[starter] & CP_MASK, ch);
            if (comp) {
                seg[starter] = comp;
                continue;
            }
        }
        if (cc == 0) starter = out;
        last_cc = cc;
        seg[out++] = seg[k];
    }
    return out;
}

/* s->cps[0..return) = NFKC of the UTF-8 src[0..len); -1 out of memory. */
static int64_t nfkc(ss__text_scratch *s, const uint8_t *src, size_t len) {
    size_t n = 0, i = 0;
    if (reserve32(&s->cps, &s->cpscap, len + 1) != 0) return SS_ENOMEM;
    /* invariant: cpscap >= n + (len - i) + 1, as each byte adds <= 1 */
    while (i < len) {
        if (src[i] < 0x80) {
            s->cps[n++] = src[i++];
            continue;
        }
        size_t j = i;
        uint32_t c = decode(src, len, &j);
        if (urec(c)->flags & SS__U_QUICK) {
            s->cps[n++] = c;
            i = j;
            continue;
        }
        size_t m = 0;
        if (reserve32(&s->seg, &s->segcap, 2 * SS__U_MAX_DECOMP + 1) != 0) return SS_ENOMEM;
        if (n) m = decompose(s->cps[--n], s->seg, m);
        m = decompose(c, s->seg, m);
        i = j;
        while (i < len) {
            j = i;
            c = decode(src, len, &j);
            if (urec(c)->flags & SS__U_QUICK) break;
            if (reserve32(&s->seg, &s->segcap, m + SS__U_MAX_DECOMP + 1) != 0) return SS_ENOMEM;
            m = decompose(c, s->seg, m);
            i = j;
        }
        reorder(s->seg, m);
        m = compose(s->seg, m);
        if (reserve32(&s->cps, &s->cpscap, n + m + (len - i) + 1) != 0) return SS_ENOMEM;
        for (size_t k = 0; k < m; k++) s->cps[n++] = s->seg[k] & CP_MASK;
    }
    return (int64_t)n;
}

/* ---- pass 2: lower-case and tokenize ----------------------------------- */

/* str.lower's final-sigma rule for the capital sigma at cps[i]. */
static int final_sigma(const uint32_t *cps, size_t n, size_t i) {
    size_t j = i;
    int cased_before = 0;
    while (j > 0) {
        uint8_t f = urec(cps[--j])->flags;
        if (f & SS__U_IGN) continue;
        cased_before = (f & SS__U_CASED) != 0;
        break;
    }
    if (!cased_before) return 0;
    for (j = i + 1; j < n; j++) {
        uint8_t f = urec(cps[j])->flags;
        if (f & SS__U_IGN) continue;
        return (f & SS__U_CASED) == 0;
    }
    return 1;
}

typedef struct {
    ss__text_scratch *s;
    size_t w, ntok;
    int in_tok;
} token_writer;

static inline void end_token(token_writer *t) {
    if (t->in_tok) {
        t->s->ends[t->ntok++] = (int64_t)t->w;
        t->in_tok = 0;
    }
}

/* One lower-cased code point of class cls into the tokens; -1 out of memory. */
static inline int put(token_writer *t, uint32_t c, int cls) {
    if (cls == 0) {
        end_token(t);
        return 0;
    }
    if (cls == CLS_HAN) end_token(t);
    ss__text_scratch *s = t->s;
    if (!t->in_tok) {
        if (t->ntok + 1 >= s->tokcap || t->w + 8 > s->bufcap) {
            if (ss__text_scratch_reserve(s, 2 * s->bufcap, 2 * t->ntok + 2) != 0) return SS_ENOMEM;
        }
        if (t->ntok) s->buf[t->w++] = ' ';
        s->starts[t->ntok] = (int64_t)t->w;
        t->in_tok = 1;
    } else if (t->w + 8 > s->bufcap) {
        if (ss__text_scratch_reserve(s, 2 * s->bufcap, 0) != 0) return SS_ENOMEM;
    }
    t->w += encode(c, s->buf + t->w);
    if (cls == CLS_HAN) end_token(t);
    return 0;
}

static inline int ascii_alnum(uint32_t c) {
    return (c - '0' < 10) | ((c | 32) - 'a' < 26);
}

static int64_t tokens_of(ss__text_scratch *s, const uint32_t *cps, size_t n) {
    token_writer t = {s, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cps[i];
        if (c < 0x80) {  /* the tables' ASCII rules, checked by gen_unicode.py */
            if (!ascii_alnum(c)) {
                end_token(&t);
            } else if (t.in_tok && t.w < s->bufcap) {
                s->buf[t.w++] = (uint8_t)(c - 'A' < 26 ? c + 32 : c);
            } else if (put(&t, c - 'A' < 26 ? c + 32 : c, CLS_WORD) != 0) {
                return SS_ENOMEM;
            }
            continue;
        }
        const ss__urec *r = urec(c);
        if (r->flags & SS__U_LMULTI) {
            const uint32_t *low = ss__u_pool + r->lower;
            for (uint32_t k = 1; k <= low[0]; k++)
                if (put(&t, low[k] & CP_MASK, (int)(low[k] >> 24)) != 0) return SS_ENOMEM;
            continue;
        }
        uint32_t lower = (uint32_t)((int32_t)c + r->lower);
        if (c == CAPITAL_SIGMA && final_sigma(cps, n, i)) lower = FINAL_SIGMA;
        if (put(&t, lower, (r->flags >> SS__U_CLS_SHIFT) & 3) != 0) return SS_ENOMEM;
    }
    end_token(&t);
    return (int64_t)t.ntok;
}

int64_t ss__tokenize_unicode(ss__text_scratch *s, const uint8_t *src, size_t len) {
    int64_t n = nfkc(s, src, len);
    if (n < 0) return SS_ENOMEM;
    return tokens_of(s, s->cps, (size_t)n);
}

/* ---- inspection (tests compare these with Python) ----------------------- */

static int64_t copy_out(const uint8_t *data, size_t n, uint8_t *out, size_t cap) {
    if (n <= cap) memcpy(out, data, n);
    return (int64_t)n;
}

int64_t ss_unicode_nfkc(const uint8_t *text, size_t len, uint8_t *out, size_t cap) {
    ss__text_scratch s;
    memset(&s, 0, sizeof(s));
    int64_t n = nfkc(&s, text, len), rc = SS_ENOMEM;
    if (n >= 0 && ss__text_scratch_reserve(&s, 4 * (size_t)n, 0) == 0) {
        size_t w = 0;
        for (int64_t k = 0; k < n; k++) w += encode(s.cps[k], s.buf + w);
        rc = copy_out(s.buf, w, out, cap);
    }
    ss__text_scratch_free(&s);
    return rc;
}

int64_t ss_unicode_tokens(const uint8_t *text, size_t len, uint8_t *out, size_t cap) {
    ss__text_scratch s;
    memset(&s, 0, sizeof(s));
    int64_t rc = SS_ENOMEM;
    if (ss__text_scratch_reserve(&s, len, len / 2 + 2) == 0) {
        int64_t ntok = ss__tokenize_unicode(&s, text, len);
        if (ntok >= 0)
            rc = copy_out(s.buf, ntok ? (size_t)s.ends[ntok - 1] : 0, out, cap);
    }
    ss__text_scratch_free(&s);
    return rc;
}
