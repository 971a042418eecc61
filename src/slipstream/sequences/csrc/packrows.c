/*
 * packrows: packed rows gathered from token pages (see packrows.h).
 *
 * A row is its pieces (a document, or a part of one) laid end to end: each
 * piece's tokens are copied from its page with the conversion to the output
 * type, its segment id (1, 2, ... in the row) and positions 0 .. len-1
 * written beside them; the rest of the row is padding (the pad token,
 * segment 0, positions 0 .. rest-1). Every piece is checked against its
 * page's offsets before it is read, so a plan or page that disagrees with
 * the lengths is an error, never a read outside the page.
 */
#include "packrows.h"

#include <stdio.h>
#include <string.h>

/* Copy with conversion; a token the output type cannot hold is an error, never wrapped. x fits a
   signed OUT_T of 2**(w-1) magnitude when (uint64)x + bias <= limit: for an unsigned IN, bias 0 and
   limit 2**(w-1) - 1; for a signed one, bias 2**(w-1) and limit 2**w - 1. x fits an unsigned OUT_T
   of w bits when (uint64)x <= 2**w - 1 (a negative x is huge as uint64): bias 0. Every limit is all
   ones, so one OR over the piece tells (vectorized; only where IN may not fit, NARROW) and the
   offending token is looked for only then. */
#define UNSIGNED(T) ((T)-1 > 0)
#define NARROW(IN, OUT_T)                                                                          \
    (UNSIGNED(OUT_T) ? (sizeof(IN) > sizeof(OUT_T) || !UNSIGNED(IN))                               \
                     : (sizeof(IN) > sizeof(OUT_T) || (UNSIGNED(IN) && sizeof(IN) == sizeof(OUT_T))))
#define HALF(OUT_T) ((uint64_t)1 << (8 * sizeof(OUT_T) - 1))
#define BIAS(IN, OUT_T) (UNSIGNED(OUT_T) || UNSIGNED(IN) ? 0 : HALF(OUT_T))
#define LIMIT(IN, OUT_T) (UNSIGNED(OUT_T) || !UNSIGNED(IN) ? HALF(OUT_T) - 1 + HALF(OUT_T) : HALF(OUT_T) - 1)

#define CONVERT(IN, OUT_T)                                                                        \
    {                                                                                             \
        const IN *s = (const IN *)src + from;                                                     \
        uint64_t acc = 0;                                                                         \
        for (int64_t k = 0; k < len; k++) {                                                       \
            d[k] = (OUT_T)s[k];                                                                   \
            if (NARROW(IN, OUT_T))                                                                \
                acc |= (uint64_t)s[k] + BIAS(IN, OUT_T);                                          \
        }                                                                                         \
        if (NARROW(IN, OUT_T) && acc > LIMIT(IN, OUT_T))                                          \
            for (int64_t k = 0; k < len; k++)                                                     \
                if ((uint64_t)s[k] + BIAS(IN, OUT_T) > LIMIT(IN, OUT_T))                          \
                    return k;                                                                     \
        return -1;                                                                                \
    }

/* -1, or the index (from `from`) of the first token that does not fit OUT_T */
#define DEFINE_COPY(NAME, OUT_T, SAME)                                                        \
    static int64_t NAME(OUT_T *d, const void *src, int type, int64_t from, int64_t len)       \
    {                                                                                         \
        if (type == SAME) {                                                                   \
            memcpy(d, (const OUT_T *)src + from, (size_t)len * sizeof(OUT_T));                \
            return -1;                                                                        \
        }                                                                                     \
        switch (type) {                                                                       \
        case TOK_U8: CONVERT(uint8_t, OUT_T)                                                  \
        case TOK_I8: CONVERT(int8_t, OUT_T)                                                   \
        case TOK_I16: CONVERT(int16_t, OUT_T)                                                 \
        case TOK_U16: CONVERT(uint16_t, OUT_T)                                                \
        case TOK_I32: CONVERT(int32_t, OUT_T)                                                 \
        case TOK_U32: CONVERT(uint32_t, OUT_T)                                                \
        case TOK_I64: CONVERT(int64_t, OUT_T)                                                 \
        case TOK_U64: CONVERT(uint64_t, OUT_T)                                                \
        default: return -1;                                                                   \
        }                                                                                     \
    }

DEFINE_COPY(copy_i32, int32_t, TOK_I32)
DEFINE_COPY(copy_i64, int64_t, TOK_I64)
DEFINE_COPY(copy_u16, uint16_t, TOK_U16)
DEFINE_COPY(copy_u32, uint32_t, TOK_U32)

static const char *const out_names[OUT_TYPES] = {"int32", "int64", "uint16", "uint32"};

/* token i of a page of `type`, as text */
static void
token_text(char *buf, size_t n, const void *src, int type, int64_t i)
{
    switch (type) {
    case TOK_U8: snprintf(buf, n, "%u", (unsigned)((const uint8_t *)src)[i]); break;
    case TOK_I8: snprintf(buf, n, "%d", (int)((const int8_t *)src)[i]); break;
    case TOK_I16: snprintf(buf, n, "%d", (int)((const int16_t *)src)[i]); break;
    case TOK_U16: snprintf(buf, n, "%u", (unsigned)((const uint16_t *)src)[i]); break;
    case TOK_I32: snprintf(buf, n, "%ld", (long)((const int32_t *)src)[i]); break;
    case TOK_U32: snprintf(buf, n, "%lu", (unsigned long)((const uint32_t *)src)[i]); break;
    case TOK_I64: snprintf(buf, n, "%lld", (long long)((const int64_t *)src)[i]); break;
    case TOK_U64: snprintf(buf, n, "%llu", (unsigned long long)((const uint64_t *)src)[i]); break;
    default: snprintf(buf, n, "?"); break;
    }
}

/* `len` values v0, v0 + step, ... of type `type` at element `base` of `dst` */
#define FILL(T)                                                                                   \
    {                                                                                             \
        T *d = (T *)dst + base;                                                                   \
        for (int64_t k = 0; k < len; k++)                                                         \
            d[k] = (T)(v0 + step * k);                                                            \
    }                                                                                             \
    break;

static void
fill(void *dst, int type, int64_t base, int64_t len, int64_t v0, int64_t step)
{
    switch (type) {
    case OUT_I32: FILL(int32_t)
    case OUT_I64: FILL(int64_t)
    case OUT_U16: FILL(uint16_t)
    case OUT_U32: FILL(uint32_t)
    default: break;
    }
}

/* segment `seg` and positions 0 .. len-1 at row `row`, column `at` (none when the outputs have no
   segments); padding: the pad token too (seg 0) */
static void
mark(const row_out *o, int64_t row, int64_t at, int64_t len, int64_t seg, int padding)
{
    int64_t base = row * o->length + at;
    if (padding)
        fill(o->tok, o->out_type, base, len, o->pad, 0);
    if (o->seg != NULL) {
        fill(o->seg, o->seg_type, base, len, seg, 0);
        fill(o->pos, o->seg_type, base, len, 0, 1);
    }
}

/* 0: written; 1: its page is not loaded (recorded); -1: error */
static int
emit(const page_table *t, row_out *o, int64_t row, int64_t at, int64_t doc, int64_t start, int64_t len, int64_t seg,
     char *msg, size_t msg_len)
{
    int64_t lo = 0, hi = t->npages, r, a, b;
    const int64_t *off;
    if (doc < 0 || doc >= t->page_first[t->npages]) {
        snprintf(msg, msg_len, "document %lld is out of range for %lld documents", (long long)doc,
                 (long long)t->page_first[t->npages]);
        return -1;
    }
    while (hi - lo > 1) { /* the last page starting at or before doc: it holds doc */
        int64_t mid = lo + (hi - lo) / 2;
        if (t->page_first[mid] <= doc)
            lo = mid;
        else
            hi = mid;
    }
    if (t->off_addr[lo] == 0 || t->val_addr[lo] == 0) {
        o->missing_count++;
        if (o->missing_count <= o->missing_cap)
            o->missing[o->missing_count - 1] = lo;
        return 1;
    }
    off = (const int64_t *)(uintptr_t)t->off_addr[lo];
    r = doc - t->page_first[lo];
    a = off[r];
    b = off[r + 1];
    if (a < 0 || b < a || b > t->nvals[lo] || start < 0 || len < 0 || start > b - a || len > b - a - start) {
        snprintf(msg, msg_len,
                 "document %lld (page %lld, row %lld): tokens %lld..%lld are not inside it (offsets %lld..%lld of %lld values)",
                 (long long)doc, (long long)lo, (long long)r, (long long)start, (long long)(start + len), (long long)a,
                 (long long)b, (long long)t->nvals[lo]);
        return -1;
    }
    if (o->missing_count == 0) {
        const void *src = (const void *)(uintptr_t)t->val_addr[lo];
        int64_t bad;
        char value[32];
        int64_t base = row * o->length + at;
        switch (o->out_type) {
        case OUT_I32: bad = copy_i32((int32_t *)o->tok + base, src, t->val_type, a + start, len); break;
        case OUT_I64: bad = copy_i64((int64_t *)o->tok + base, src, t->val_type, a + start, len); break;
        case OUT_U16: bad = copy_u16((uint16_t *)o->tok + base, src, t->val_type, a + start, len); break;
        default: bad = copy_u32((uint32_t *)o->tok + base, src, t->val_type, a + start, len); break;
        }
        if (bad >= 0) {
            token_text(value, sizeof(value), src, t->val_type, a + start + bad);
            snprintf(msg, msg_len, "document %lld: token %lld is %s, which does not fit dtype %s (token ids are never wrapped)",
                     (long long)doc, (long long)(start + bad), value, out_names[o->out_type]);
            return -1;
        }
        mark(o, row, at, len, seg, 0);
    }
    return 0;
}

int
rows_from_bins(const bins_plan *plan, const page_table *pages, const int64_t *rows, int64_t B, row_out *out,
               char *msg, size_t msg_len)
{
    for (int64_t i = 0; i < B; i++) {
        int64_t k = rows[i], at = 0, seg = 0, lo, hi;
        if (k < 0 || k >= plan->nbins) {
            snprintf(msg, msg_len, "row %lld is out of range for %lld rows", (long long)k, (long long)plan->nbins);
            return -1;
        }
        lo = plan->bin_offsets[k];
        hi = plan->bin_offsets[k + 1];
        if (lo < 0 || hi < lo || hi > plan->nitems) {
            snprintf(msg, msg_len, "row %lld: its plan entries %lld..%lld are out of range", (long long)k, (long long)lo,
                     (long long)hi);
            return -1;
        }
        for (int64_t j = lo; j < hi; j++) {
            int64_t id = plan->bin_items[j], doc, start = 0, len;
            if (id < 0 || id >= plan->ndocs + plan->nextra) {
                snprintf(msg, msg_len, "row %lld: item %lld is out of range", (long long)k, (long long)id);
                return -1;
            }
            doc = id;
            if (id >= plan->ndocs) {
                doc = plan->extra_doc[id - plan->ndocs];
                start = plan->extra_start[id - plan->ndocs];
                if (doc < 0 || doc >= plan->ndocs) {
                    snprintf(msg, msg_len, "row %lld: piece %lld names document %lld, out of range", (long long)k,
                             (long long)id, (long long)doc);
                    return -1;
                }
            }
            len = plan->lengths[doc] - start;
            if (len > out->length)
                len = out->length;
            if (len <= 0 || len > out->length - at) {
                snprintf(msg, msg_len, "row %lld: document %lld from token %lld does not fit the row (%lld of %lld tokens used)",
                         (long long)k, (long long)doc, (long long)start, (long long)at, (long long)out->length);
                return -1;
            }
            if (emit(pages, out, i, at, doc, start, len, ++seg, msg, msg_len) < 0)
                return -1;
            at += len;
        }
        if (out->missing_count == 0)
            mark(out, i, at, out->length - at, 0, 1);
    }
    return 0;
}

int
rows_from_concat(const concat_plan *plan, const page_table *pages, const int64_t *rows, int64_t B, row_out *out,
                 char *msg, size_t msg_len)
{
    int64_t total = plan->cum[plan->n], L = out->length;
    int64_t nrows = total / L + (total % L != 0);
    for (int64_t i = 0; i < B; i++) {
        int64_t k = rows[i], t0, t1, lo = 0, hi = plan->n, at = 0, seg = 0;
        if (k < 0 || k >= nrows) {
            snprintf(msg, msg_len, "row %lld is out of range for %lld rows", (long long)k, (long long)nrows);
            return -1;
        }
        t0 = k * L;
        t1 = total - t0 < L ? total : t0 + L;
        while (hi - lo > 1) { /* the last document starting at or before t0 */
            int64_t mid = lo + (hi - lo) / 2;
            if (plan->cum[mid] <= t0)
                lo = mid;
            else
                hi = mid;
        }
        for (int64_t j = lo; t0 < t1; j++) {
            int64_t c0, c1, len, doc;
            if (j >= plan->n || plan->cum[j + 1] < plan->cum[j]) {
                snprintf(msg, msg_len, "the cumulative lengths are not non-decreasing at %lld", (long long)j);
                return -1;
            }
            c0 = plan->cum[j];
            c1 = plan->cum[j + 1];
            if (c1 <= t0)
                continue; /* an empty document */
            len = (c1 < t1 ? c1 : t1) - t0;
            doc = plan->order != NULL ? plan->order[j] : j;
            if (emit(pages, out, i, at, doc, t0 - c0, len, ++seg, msg, msg_len) < 0)
                return -1;
            at += len;
            t0 += len;
        }
        if (out->missing_count == 0)
            mark(out, i, at, L - at, 0, 1);
    }
    return 0;
}
