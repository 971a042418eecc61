/*
 * _mixing: the kernels of ss.mix, each the exact twin of a NumPy/Python
 * reference (integer arithmetic only, so the results are identical):
 *
 *   simulate  the earliest-deadline interleave of slipstream.sequences.interleave
 *             (simulate_reference, csrc/mixsim.c): which source each position reads;
 *   locate    the same for scattered positions, each from its checkpoint
 *             (interleave.locate_reference);
 *   permute   the keyed Feistel permutation with cycle walking of
 *             slipstream.sequences.permute (permute_reference, csrc/feistel.c);
 *   items     each mixture position's index in its source: its pass's
 *             permutation of its count (permute.items_reference).
 *
 * Every argument is checked (element sizes and kinds, lengths, the weights'
 * rows, the state's bounds) before the GIL is released, so bad input raises
 * ValueError/TypeError and never reads or writes out of bounds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "feistel.h"
#include "mixsim.h"
#include "pybuffers.h"

#define I32 "i"
#define MSG 200

PyDoc_STRVAR(simulate_doc,
"simulate(w, starts, T, S, u0, u1, lam, cnt, src, idx, every, ck_lam, ck_cnt)\n"
"\n"
"slipstream.sequences.interleave.simulate_reference, compiled: run positions\n"
"u0..u1-1 from the state (lam, cnt: int64, n each, updated in place). w: int64\n"
"(m*n) rows of weights summing to T; starts: int64 (m), 0 first, increasing.\n"
"src (int32) and idx (int64): empty, or u1-u0 outputs; every > 0: the state\n"
"after every `every` positions into ck_lam and ck_cnt (int64 rows of n).");

/* The frame of views w (v[0]) and starts (v[1]) with n sources; -1 (ValueError set) when invalid. */
static int
frame_of(Py_buffer *v, int64_t n, long long T, long long S, mix_frame *f, const char *who)
{
    char msg[MSG] = "";
    f->w = v[0].buf;
    f->starts = v[1].buf;
    f->m = v[1].len / 8;
    f->n = n;
    f->T = T;
    f->S = S;
    if (n < 1 || f->m < 1 || (v[0].len / 8) % n != 0 || v[0].len / 8 / n != f->m) {
        PyErr_Format(PyExc_ValueError, "%s: w must hold len(starts) rows of %lld weights", who, (long long)n);
        return -1;
    }
    if (mix_check_frame(f, msg, sizeof(msg)) < 0) {
        PyErr_Format(PyExc_ValueError, "%s: %s", who, msg);
        return -1;
    }
    return 0;
}

static PyObject *
simulate(PyObject *self, PyObject *args)
{
    PyObject *o[9];
    long long T, S, u0, u1, every;
    Py_buffer v[8];
    const char *names[8] = {"w", "starts", "lam", "cnt", "src", "idx", "ck_lam", "ck_cnt"};
    char msg[MSG] = "";
    int64_t n, steps, *d = NULL;
    mix_frame f;
    int rc = 0;
    (void)self;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "OOLLLLOOOOLOO", &o[0], &o[1], &T, &S, &u0, &u1, &o[2], &o[3], &o[4], &o[5], &every, &o[6], &o[7]))
        return NULL;
    for (int j = 0; j < 8; j++)
        if (get_ints(o[j], &v[j], j >= 2, j == 4 ? 4 : 8, j == 4 ? I32 : I64, names[j]) < 0)
            goto done;
    n = v[2].len / 8;
    steps = u1 - u0;
    if (v[3].len / 8 != n || frame_of(v, n, T, S, &f, "simulate") < 0)
        goto done;
    if (u0 < 0 || u1 < u0 || u1 > MIX_POS_MAX || every < 0) {
        PyErr_Format(PyExc_ValueError, "simulate: bad positions %lld..%lld or every %lld", u0, u1, every);
        goto done;
    }
    if ((v[4].len && v[4].len / 4 != steps) || (v[5].len && v[5].len / 8 != steps)
        || (every && (v[6].len / 8 / n < steps / every || v[7].len / 8 / n < steps / every))) { /* rows: no product to wrap */
        PyErr_SetString(PyExc_ValueError, "simulate: src and idx must be empty or hold u1-u0 entries, ck_lam and ck_cnt (u1-u0)//every rows");
        goto done;
    }
    if (mix_check_state(&f, v[2].buf, v[3].buf, msg, sizeof(msg)) < 0) {
        PyErr_Format(PyExc_ValueError, "simulate: %s", msg);
        goto done;
    }
    d = PyMem_Malloc((size_t)n * sizeof(int64_t));
    if (d == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = mix_run(&f, u0, u1, v[2].buf, v[3].buf, d, v[4].len ? v[4].buf : NULL, v[5].len ? v[5].buf : NULL, every, v[6].buf,
                 v[7].buf);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_SetString(PyExc_ValueError, "simulate: a lag left its bounds (the state was not one the interleave reaches)");
done:
    PyMem_Free(d);
    release_all(v, 8);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(locate_doc,
"locate(w, starts, T, S, every, ck_lam, ck_cnt, r, src, idx)\n"
"\n"
"slipstream.sequences.interleave.locate_reference, compiled: the source (src,\n"
"int32) and that source's count before (idx, int64) of positions r (int64,\n"
"ascending, >= 0), each simulated from its checkpoint: row b of ck_lam and\n"
"ck_cnt (int64, rows of n) is the state before position b * every.");

static PyObject *
locate(PyObject *self, PyObject *args)
{
    PyObject *o[7];
    long long T, S, every;
    Py_buffer v[7];
    const char *names[7] = {"w", "starts", "ck_lam", "ck_cnt", "r", "src", "idx"};
    char msg[MSG] = "";
    int64_t n, count, rows, *scratch = NULL, *bidx = NULL;
    int32_t *bsrc = NULL;
    mix_frame f;
    int rc = 0;
    (void)self;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "OOLLLOOOOO", &o[0], &o[1], &T, &S, &every, &o[2], &o[3], &o[4], &o[5], &o[6]))
        return NULL;
    for (int j = 0; j < 7; j++)
        if (get_ints(o[j], &v[j], j >= 5, j == 5 ? 4 : 8, j == 5 ? I32 : I64, names[j]) < 0)
            goto done;
    count = v[4].len / 8;
    if (every < 1 || every > ((int64_t)1 << 24)) {
        PyErr_Format(PyExc_ValueError, "locate: every must be 1..2**24, got %lld", every);
        goto done;
    }
    /* n: the length of w's rows */
    if (v[1].len == 0 || v[0].len == 0 || (v[0].len / 8) % (v[1].len / 8) != 0) {
        PyErr_SetString(PyExc_ValueError, "locate: w must hold len(starts) rows of weights");
        goto done;
    }
    n = (v[0].len / 8) / (v[1].len / 8);
    if (frame_of(v, n, T, S, &f, "locate") < 0)
        goto done;
    rows = v[2].len / 8 / n;
    if (v[3].len != v[2].len || (v[2].len / 8) % n != 0 || v[5].len / 4 != count || v[6].len / 8 != count) {
        PyErr_SetString(PyExc_ValueError, "locate: ck_lam and ck_cnt must be rows of n, src and idx len(r) entries");
        goto done;
    }
    {
        const int64_t *r = v[4].buf;
        for (int64_t j = 0; j < count; j++)
            if (r[j] < 0 || (j && r[j] < r[j - 1]) || r[j] / every >= rows) {
                PyErr_Format(PyExc_ValueError, "locate: position %lld is negative, out of order or past the checkpoints", (long long)r[j]);
                goto done;
            }
        for (int64_t j = 0; j < count; j++) {
            int64_t b = r[j] / every;
            if ((j == 0 || b != r[j - 1] / every)
                && mix_check_state(&f, (const int64_t *)v[2].buf + b * n, (const int64_t *)v[3].buf + b * n, msg, sizeof(msg)) < 0) {
                PyErr_Format(PyExc_ValueError, "locate: checkpoint %lld: %s", (long long)b, msg);
                goto done;
            }
        }
    }
    scratch = PyMem_Malloc((size_t)(3 * n) * sizeof(int64_t));
    bsrc = PyMem_Malloc((size_t)every * sizeof(int32_t));
    bidx = PyMem_Malloc((size_t)every * sizeof(int64_t));
    if (scratch == NULL || bsrc == NULL || bidx == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = mix_locate(&f, every, v[2].buf, v[3].buf, v[4].buf, count, v[5].buf, v[6].buf, scratch, bsrc, bidx);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_SetString(PyExc_ValueError, "locate: a lag left its bounds (a checkpoint was not one the interleave reaches)");
done:
    PyMem_Free(scratch);
    PyMem_Free(bsrc);
    PyMem_Free(bidx);
    release_all(v, 7);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(permute_doc,
"permute(x, n, keys, out)\n"
"\n"
"slipstream.sequences.permute.permute_reference, compiled: out[j] is x[j]'s image\n"
"under the permutation of [0, n[j]) keyed by keys[j] (x, n, out int64; keys\n"
"uint64; one length). ValueError unless 0 <= x[j] < n[j].");

static PyObject *
permute(PyObject *self, PyObject *args)
{
    PyObject *o[4];
    Py_buffer v[4];
    int64_t count;
    (void)self;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3]))
        return NULL;
    if (get_ints(o[0], &v[0], 0, 8, I64, "x") < 0 || get_ints(o[1], &v[1], 0, 8, I64, "n") < 0
        || get_ints(o[2], &v[2], 0, 8, U64, "keys") < 0 || get_ints(o[3], &v[3], 1, 8, I64, "out") < 0)
        goto done;
    count = v[0].len / 8;
    if (v[1].len != v[0].len || v[2].len != v[0].len || v[3].len != v[0].len) {
        PyErr_SetString(PyExc_ValueError, "permute: x, n, keys and out must have one length");
        goto done;
    }
    {
        const int64_t *x = v[0].buf, *n = v[1].buf;
        const uint64_t *keys = v[2].buf;
        int64_t *out = v[3].buf;
        for (int64_t j = 0; j < count; j++) {
            if (n[j] < 1 || x[j] < 0 || x[j] >= n[j]) {
                PyErr_Format(PyExc_ValueError, "permute: position %lld is not in [0, %lld)", (long long)x[j], (long long)n[j]);
                goto done;
            }
        }
        Py_BEGIN_ALLOW_THREADS
        for (int64_t j = 0; j < count; j++)
            out[j] = feistel_permute((uint64_t)x[j], (uint64_t)n[j], keys[j]);
        Py_END_ALLOW_THREADS
    }
done:
    release_all(v, 4);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(items_doc,
"items(src, count, lengths, keys, out)\n"
"\n"
"slipstream.sequences.permute.items_reference, compiled: out[j] is the index in\n"
"source src[j] (int32) of its item number count[j] (int64 >= 0): the image of\n"
"count % L under the permutation keyed by mix64(keys[s] ^ mix64((count // L + 1)\n"
"* GOLDEN)), L = lengths[s] (int64 >= 1), keys uint64, out int64.");

static PyObject *
items(PyObject *self, PyObject *args)
{
    PyObject *o[5];
    Py_buffer v[5];
    int64_t count, n;
    (void)self;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4]))
        return NULL;
    if (get_ints(o[0], &v[0], 0, 4, I32, "src") < 0 || get_ints(o[1], &v[1], 0, 8, I64, "count") < 0
        || get_ints(o[2], &v[2], 0, 8, I64, "lengths") < 0 || get_ints(o[3], &v[3], 0, 8, U64, "keys") < 0
        || get_ints(o[4], &v[4], 1, 8, I64, "out") < 0)
        goto done;
    count = v[1].len / 8;
    n = v[2].len / 8;
    if (v[0].len / 4 != count || v[4].len / 8 != count || v[3].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "items: src, count and out must have one length, keys that of lengths");
        goto done;
    }
    {
        const int32_t *src = v[0].buf;
        const int64_t *c = v[1].buf, *lengths = v[2].buf;
        const uint64_t *keys = v[3].buf;
        int64_t *out = v[4].buf;
        for (int64_t s = 0; s < n; s++)
            if (lengths[s] < 1) {
                PyErr_Format(PyExc_ValueError, "items: source %lld has length %lld", (long long)s, (long long)lengths[s]);
                goto done;
            }
        for (int64_t j = 0; j < count; j++)
            if (src[j] < 0 || src[j] >= n || c[j] < 0) {
                PyErr_Format(PyExc_ValueError, "items: entry %lld has source %d of %lld, count %lld", (long long)j, (int)src[j],
                             (long long)n, (long long)c[j]);
                goto done;
            }
        Py_BEGIN_ALLOW_THREADS
        for (int64_t j = 0; j < count; j++) {
            int64_t L = lengths[src[j]];
            uint64_t pass = (uint64_t)(c[j] / L);
            out[j] = feistel_permute((uint64_t)(c[j] % L), (uint64_t)L, feistel_pass_key(keys[src[j]], pass));
        }
        Py_END_ALLOW_THREADS
    }
done:
    release_all(v, 5);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"items", items, METH_VARARGS, items_doc},
    {"simulate", simulate, METH_VARARGS, simulate_doc},
    {"locate", locate, METH_VARARGS, locate_doc},
    {"permute", permute, METH_VARARGS, permute_doc},
    {NULL, NULL, 0, NULL},
};

/* No process-wide state: the kernels work in their arguments and per-call
   memory only, so the module runs without the GIL where the interpreter is
   free-threaded. The argument buffers are held as Py_buffer views for the
   whole call; their contents (the state checked before the GIL is released
   included) must not be written by other threads while a call runs. */
static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_mixing", "The compiled kernels of ss.mix.", 0, methods, slots};

PyMODINIT_FUNC
PyInit__mixing(void)
{
    return PyModuleDef_Init(&module);
}
