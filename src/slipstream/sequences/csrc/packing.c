/*
 * _packing: the Python face of the token-packing kernels: plans
 * (csrc/packplan.c) and row gathers into caller-owned batch arrays
 * (csrc/packrows.c). Every argument is checked (item sizes, C-contiguous
 * buffers of the right element size and count) before the GIL is released.
 * The page table holds raw addresses: its caller keeps those arrays alive
 * and has checked that each page's offsets hold one more entry than it has
 * documents (slipstream.sequences.rows does both).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "packplan.h"
#include "packrows.h"
#include "pybuffers.h"

#define MSG 320

PyDoc_STRVAR(plan_doc,
"plan(sizes, ids, keys, capacity, method, max_bins, bin_offsets, bin_items) -> bins\n"
"\n"
"Bin-pack items of `sizes` (int64, each 1..capacity) in decreasing size, equal\n"
"sizes in a shuffled order (keys: uint64 round keys of the Feistel shuffle,\n"
"4 of them; empty: the items' own order): method 0 best fit, 1 first fit.\n"
"Writes the CSR plan into bin_offsets (int64, >= max_bins + 1) and bin_items\n"
"(int64, >= len(sizes)): bin b holds ids[k] (k itself when ids is empty) for\n"
"the k placed in it, in placement order. Returns the number of bins.");

static PyObject *
plan(PyObject *self, PyObject *args)
{
    PyObject *o_sizes, *o_ids, *o_keys, *o_offsets, *o_items;
    long long capacity, max_bins;
    int method;
    Py_buffer v[5];
    char msg[MSG] = "";
    int64_t n, bins = -1;
    (void)self;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "OOOLiLOO", &o_sizes, &o_ids, &o_keys, &capacity, &method, &max_bins, &o_offsets, &o_items))
        return NULL;
    if (get_ints(o_sizes, &v[0], 0, 8, I64, "sizes") < 0 || get_ints(o_ids, &v[1], 0, 8, I64, "ids") < 0
        || get_ints(o_offsets, &v[2], 1, 8, I64, "bin_offsets") < 0 || get_ints(o_items, &v[3], 1, 8, I64, "bin_items") < 0
        || get_ints(o_keys, &v[4], 0, 8, U64, "keys") < 0)
        goto done;
    n = v[0].len / 8;
    if (method != PACK_BEST_FIT && method != PACK_FIRST_FIT) {
        PyErr_Format(PyExc_ValueError, "method must be 0 (best fit) or 1 (first fit), got %d", method);
        goto done;
    }
    if (capacity < 1 || capacity > ((long long)1 << 30) || max_bins < 0 || max_bins > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "capacity %lld must be 1..2**30 and max_bins %lld 0..2**31-1", capacity, max_bins);
        goto done;
    }
    if ((v[1].len != 0 && v[1].len != v[0].len) || (v[4].len != 0 && v[4].len != 32) || v[2].len / 8 < max_bins + 1
        || v[3].len / 8 < n) {
        PyErr_SetString(PyExc_ValueError, "plan: ids must match sizes (or be empty), keys hold 4 (or none), bin_offsets max_bins + 1 and bin_items len(sizes)");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    bins = pack_plan((const int64_t *)v[0].buf, v[1].len ? (const int64_t *)v[1].buf : NULL,
                     v[4].len ? (const uint64_t *)v[4].buf : NULL, n, capacity, method, max_bins,
                     (int64_t *)v[2].buf, (int64_t *)v[3].buf, msg, sizeof(msg));
    Py_END_ALLOW_THREADS
    if (bins == -2)
        PyErr_NoMemory();
    else if (bins < 0)
        PyErr_Format(PyExc_ValueError, "plan: %s", msg);
done:
    release_all(v, 5);
    if (PyErr_Occurred())
        return NULL;
    return PyLong_FromLongLong(bins);
}

/* element size and buffer formats of an output type */
static Py_ssize_t
out_size(int type, const char **kinds)
{
    switch (type) {
    case OUT_I32: *kinds = "i"; return 4;
    case OUT_I64: *kinds = I64; return 8;
    case OUT_U16: *kinds = "H"; return 2;
    default: *kinds = "I"; return 4;
    }
}

/* the page table, the outputs (tokens; segment ids and positions unless seg_type is -1, when
   both must be None) and the missing-pages array (objs[8], int64), shared by both row gathers:
   views v[0..8] */
static int
rows_common(PyObject **objs, Py_buffer *v, long long length, long long pad, int val_type, int out_type, int seg_type,
            page_table *t, row_out *o, int64_t *B)
{
    const char *outkinds, *segkinds = "";
    Py_ssize_t outsize, segsize = 0;
    int nout = seg_type < 0 ? 6 : 8;
    const char *names[8] = {"rows", "page_first", "off_addr", "val_addr", "nvals", "tokens", "segment_ids", "positions"};
    if (val_type < 0 || val_type >= TOK_TYPES || out_type < 0 || out_type >= OUT_TYPES || seg_type < -1
        || seg_type >= OUT_TYPES || length < 1) {
        PyErr_Format(PyExc_ValueError, "bad token type %d, output types %d/%d or length %lld", val_type, out_type, seg_type,
                     length);
        return -1;
    }
    outsize = out_size(out_type, &outkinds);
    if ((out_type == OUT_I32 && (pad < INT32_MIN || pad > INT32_MAX)) || (out_type == OUT_U16 && (pad < 0 || pad > 65535))
        || (out_type == OUT_U32 && (pad < 0 || pad > (long long)UINT32_MAX))) {
        PyErr_Format(PyExc_ValueError, "pad %lld does not fit output type %d", pad, out_type);
        return -1;
    }
    if (seg_type >= 0) {
        segsize = out_size(seg_type, &segkinds);
        if ((seg_type == OUT_U16 && length > 65535) || (seg_type == OUT_I32 && length > INT32_MAX)
            || (seg_type == OUT_U32 && length > (long long)UINT32_MAX)) {
            PyErr_Format(PyExc_ValueError, "segment ids and positions of rows of length %lld do not fit output type %d", length,
                         seg_type);
            return -1;
        }
    } else if (objs[6] != Py_None || objs[7] != Py_None) {
        PyErr_SetString(PyExc_ValueError, "without segments (seg_type -1) segment_ids and positions must be None");
        return -1;
    }
    for (int k = 0; k < nout; k++) {
        int writable = k >= 5;
        Py_ssize_t size = k == 5 ? outsize : k > 5 ? segsize : 8;
        const char *kinds = k == 5 ? outkinds : k > 5 ? segkinds : (k == 2 || k == 3) ? U64 : I64;
        if (get_ints(objs[k], &v[k], writable, size, kinds, names[k]) < 0)
            return -1;
    }
    *B = v[0].len / 8;
    t->npages = v[1].len / 8 - 1;
    if (t->npages < 1 || v[2].len / 8 != t->npages || v[3].len / 8 != t->npages || v[4].len / 8 != t->npages) {
        PyErr_SetString(PyExc_ValueError, "the page table needs page_first of pages + 1 entries (pages >= 1) and the rest of pages");
        return -1;
    }
    if (*B > 0 && length > PY_SSIZE_T_MAX / 8 / *B) { /* B * length * 8 would wrap */
        PyErr_Format(PyExc_ValueError, "rows of length %lld are too long for %lld rows", length, (long long)*B);
        return -1;
    }
    for (int k = 5; k < nout; k++) {
        Py_ssize_t size = k == 5 ? outsize : segsize;
        if (v[k].len != (Py_ssize_t)(*B * length * size)) {
            PyErr_Format(PyExc_ValueError, "%s holds %zd values, not %lld rows of %lld", names[k], v[k].len / size,
                         (long long)*B, length);
            return -1;
        }
    }
    t->page_first = (const int64_t *)v[1].buf;
    t->off_addr = (const uint64_t *)v[2].buf;
    t->val_addr = (const uint64_t *)v[3].buf;
    t->nvals = (const int64_t *)v[4].buf;
    t->val_type = val_type;
    if (t->page_first[0] != 0) {
        PyErr_SetString(PyExc_ValueError, "page_first must start at 0");
        return -1;
    }
    for (int64_t p = 0; p < t->npages; p++) {
        if (t->page_first[p + 1] < t->page_first[p] || t->nvals[p] < 0) {
            PyErr_Format(PyExc_ValueError, "page %lld: page_first must not decrease and its values count be >= 0", (long long)p);
            return -1;
        }
    }
    o->tok = v[5].buf;
    o->seg = seg_type < 0 ? NULL : v[6].buf;
    o->pos = seg_type < 0 ? NULL : v[7].buf;
    o->out_type = out_type;
    o->seg_type = seg_type;
    o->length = length;
    o->pad = pad;
    o->missing_count = 0;
    if (get_ints(objs[8], &v[8], 1, 8, I64, "missing") < 0)
        return -1;
    o->missing = (int64_t *)v[8].buf;
    o->missing_cap = v[8].len / 8;
    return 0;
}

/* release the gather's `n` views; its result: the missing count, NULL when an error is set or rc < 0 (ValueError msg) */
static PyObject *
finish_rows(int rc, const char *msg, row_out *o, Py_buffer *v, int n)
{
    release_all(v, n);
    if (PyErr_Occurred())
        return NULL;
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, msg);
        return NULL;
    }
    return PyLong_FromLongLong(o->missing_count);
}

PyDoc_STRVAR(rows_bins_doc,
"rows_bins(rows, page_first, off_addr, val_addr, nvals, tokens, segment_ids, positions,\n"
"          missing, bin_offsets, bin_items, lengths, extra_doc, extra_start,\n"
"          length, pad, val_type, out_type, seg_type) -> missing pages\n"
"\n"
"Fill rows `rows` of a bins plan (see packrows.h) into tokens, segment_ids and\n"
"positions (C-contiguous, len(rows) * length each; tokens int32, int64, uint16\n"
"or uint32 as out_type 0/1/2/3, segment ids and positions as seg_type, or\n"
"seg_type -1 with both None: tokens only). A page the table has not loaded\n"
"is written into `missing` (int64); the\n"
"count of pieces on such pages is returned, and when it is not 0 the outputs\n"
"are incomplete: load the pages and call again. ValueError for a plan or page\n"
"that disagrees with the lengths.");

static PyObject *
rows_bins(PyObject *self, PyObject *args)
{
    PyObject *objs[9], *o_off, *o_items, *o_len, *o_edoc, *o_estart;
    long long length, pad;
    int val_type, out_type, seg_type, rc = -1;
    Py_buffer v[14];
    page_table t;
    row_out o;
    bins_plan p;
    int64_t B = 0;
    char msg[MSG] = "";
    (void)self;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOLLiii", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6],
                          &objs[7], &objs[8], &o_off, &o_items, &o_len, &o_edoc, &o_estart, &length, &pad, &val_type,
                          &out_type, &seg_type))
        return NULL;
    if (rows_common(objs, v, length, pad, val_type, out_type, seg_type, &t, &o, &B) < 0
        || get_ints(o_off, &v[9], 0, 8, I64, "bin_offsets") < 0 || get_ints(o_items, &v[10], 0, 8, I64, "bin_items") < 0
        || get_ints(o_len, &v[11], 0, 8, I64, "lengths") < 0 || get_ints(o_edoc, &v[12], 0, 8, I64, "extra_doc") < 0
        || get_ints(o_estart, &v[13], 0, 8, I64, "extra_start") < 0)
        goto done;
    p.nbins = v[9].len / 8 - 1;
    p.nitems = v[10].len / 8;
    p.ndocs = v[11].len / 8;
    p.nextra = v[12].len / 8;
    if (p.nbins < 0 || v[13].len != v[12].len || p.ndocs != t.page_first[t.npages]) {
        PyErr_SetString(PyExc_ValueError, "rows_bins: bin_offsets needs rows + 1 entries, extra_start as many as extra_doc, lengths one per document");
        goto done;
    }
    p.bin_offsets = (const int64_t *)v[9].buf;
    p.bin_items = (const int64_t *)v[10].buf;
    p.lengths = (const int64_t *)v[11].buf;
    p.extra_doc = (const int64_t *)v[12].buf;
    p.extra_start = (const int64_t *)v[13].buf;
    Py_BEGIN_ALLOW_THREADS
    rc = rows_from_bins(&p, &t, (const int64_t *)v[0].buf, B, &o, msg, sizeof(msg));
    Py_END_ALLOW_THREADS
done:
    return finish_rows(rc, msg, &o, v, 14);
}

PyDoc_STRVAR(rows_concat_doc,
"rows_concat(rows, page_first, off_addr, val_addr, nvals, tokens, segment_ids, positions,\n"
"            missing, cum, order, length, pad, val_type, out_type, seg_type) -> missing pages\n"
"\n"
"As rows_bins, for a concatenation: documents order[j] (j itself when order is\n"
"empty) with cumulative lengths cum (int64, documents + 1, from 0), cut every\n"
"`length` tokens; the last row is padded.");

static PyObject *
rows_concat(PyObject *self, PyObject *args)
{
    PyObject *objs[9], *o_cum, *o_order;
    long long length, pad;
    int val_type, out_type, seg_type, rc = -1;
    Py_buffer v[11];
    page_table t;
    row_out o;
    concat_plan p;
    int64_t B = 0;
    char msg[MSG] = "";
    (void)self;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOLLiii", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6],
                          &objs[7], &objs[8], &o_cum, &o_order, &length, &pad, &val_type, &out_type, &seg_type))
        return NULL;
    if (rows_common(objs, v, length, pad, val_type, out_type, seg_type, &t, &o, &B) < 0
        || get_ints(o_cum, &v[9], 0, 8, I64, "cum") < 0 || get_ints(o_order, &v[10], 0, 8, I64, "order") < 0)
        goto done;
    p.n = v[9].len / 8 - 1;
    p.cum = (const int64_t *)v[9].buf;
    p.order = v[10].len ? (const int64_t *)v[10].buf : NULL;
    if (p.n < 1 || p.cum[0] != 0 || (p.order != NULL && v[10].len / 8 != p.n)) {
        PyErr_SetString(PyExc_ValueError, "rows_concat: cum needs documents + 1 entries from 0, order one per document or none");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = rows_from_concat(&p, &t, (const int64_t *)v[0].buf, B, &o, msg, sizeof(msg));
    Py_END_ALLOW_THREADS
done:
    return finish_rows(rc, msg, &o, v, 11);
}

static PyMethodDef methods[] = {
    {"plan", plan, METH_VARARGS, plan_doc},
    {"rows_bins", rows_bins, METH_VARARGS, rows_bins_doc},
    {"rows_concat", rows_concat, METH_VARARGS, rows_concat_doc},
    {NULL, NULL, 0, NULL},
};

/* No process-wide state: the kernels work in their arguments and per-call
   memory only, so the module runs without the GIL where the interpreter is
   free-threaded. The argument buffers are held as Py_buffer views for the
   whole call; their contents must not be written by other threads while a
   call runs, and the arrays behind the page table's raw addresses are the
   caller's to keep alive (see the top). */
static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_packing",
                                    "Token packing kernels: bin-packing plans and packed-row gathers.", 0, methods,
                                    slots, NULL, NULL, NULL};

PyMODINIT_FUNC
PyInit__packing(void)
{
    return PyModuleDef_Init(&module);
}
