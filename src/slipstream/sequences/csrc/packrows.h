/*
 * packrows: fill packed rows (tokens, segment ids, positions) from token pages.
 */
#ifndef SLIPSTREAM_PACKROWS_H
#define SLIPSTREAM_PACKROWS_H

#include <stddef.h>
#include <stdint.h>

/* stored token types */
enum { TOK_U8, TOK_I16, TOK_U16, TOK_I32, TOK_U32, TOK_I64, TOK_U64, TOK_I8, TOK_TYPES };
/* output types (tokens; segment ids and positions) */
enum { OUT_I32, OUT_I64, OUT_U16, OUT_U32, OUT_TYPES };

/* The pages of the documents: page p holds documents page_first[p] ..
 * page_first[p+1]-1; its offsets (int64, one more than its documents) and
 * values are at off_addr[p] / val_addr[p] (0: not loaded), nvals[p] values. */
typedef struct {
    int64_t npages;
    const int64_t *page_first;
    const uint64_t *off_addr;
    const uint64_t *val_addr;
    const int64_t *nvals;
    int val_type;
} page_table;

/* B rows of `length` tokens, segment ids, positions, each C-contiguous; seg and pos
 * both NULL: tokens only (no segment ids or positions written). Tokens are of
 * out_type, segment ids and positions of seg_type (which holds `length`). */
typedef struct {
    void *tok, *seg, *pos;
    int out_type, seg_type;
    int64_t length;
    int64_t pad;
    /* pages needed but not loaded: recorded (up to cap), nothing else is promised */
    int64_t *missing;
    int64_t missing_cap;
    int64_t missing_count;
} row_out;

/* A bins plan: row k holds the items bin_items[bin_offsets[k] .. bin_offsets[k+1]-1];
 * item i < ndocs is document i from token 0, item ndocs + j is document
 * extra_doc[j] from token extra_start[j]; each is at most `length` tokens. */
typedef struct {
    int64_t nbins, nitems, ndocs, nextra;
    const int64_t *bin_offsets, *bin_items, *extra_doc, *extra_start, *lengths;
} bins_plan;

/* A concatenation: documents order[0], order[1], ... (order NULL: 0, 1, ...)
 * whose cumulative lengths are cum[0..n] (cum[0] = 0), cut every `length`. */
typedef struct {
    int64_t n;
    const int64_t *cum, *order;
} concat_plan;

/* Fill the rows rows[0..B-1]; 0 on success, -1 with msg set. */
int rows_from_bins(const bins_plan *plan, const page_table *pages, const int64_t *rows, int64_t B, row_out *out,
                   char *msg, size_t msg_len);
int rows_from_concat(const concat_plan *plan, const page_table *pages, const int64_t *rows, int64_t B, row_out *out,
                     char *msg, size_t msg_len);

#endif
