/*
 * _mixing: the kernels of ss.mix, each the exact twin of a NumPy/Python
 * reference (integer arithmetic only, so the results are identical):
 *
 *   simulate  the earliest-deadline interleave of slipstream.sequences.interleave
 *             (simulate_reference): which source each position reads;
 *   permute   the keyed Feistel permutation with cycle walking of
 *             slipstream.sequences.permute (permute_reference);
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

#define I64 "lq"
#define U64 "LQ"
#define I32 "i"
#define INF INT64_MAX
#define POS_MAX ((int64_t)1 << 61)
#define T_MAX ((int64_t)1 << 56)
#define LAM_MAX ((int64_t)1 << 60)
#define GOLDEN 0x9E3779B97F4A7C15ULL
#define ROUNDS 6

/* A C-contiguous buffer of `itemsize`-byte integers of a kind in `kinds`. */
static int
get_ints(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, const char *kinds, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    const char *fmt;
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    fmt = view->format ? view->format : "B";
    if (fmt[0] == '<' || fmt[0] == '=' || fmt[0] == '@')
        fmt++;
    if (view->itemsize != itemsize || strlen(fmt) != 1 || strchr(kinds, fmt[0]) == NULL
        || ((uintptr_t)view->buf % (uintptr_t)itemsize) != 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected an aligned contiguous array of %zd-byte integers, got format '%s' of %zd bytes",
                     name, itemsize, view->format ? view->format : "B", view->itemsize);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

static void
release_all(Py_buffer *views, int n)
{
    for (int k = 0; k < n; k++)
        if (views[k].obj != NULL)
            PyBuffer_Release(&views[k]);
}

/* The last position v > u by which the weights of source i over positions u+1..v add up to
 * `need` (u when need <= 0, INF when they never do); k: the piece of u, or an earlier one. */
static int64_t
due(const int64_t *w, const int64_t *starts, int64_t m, int64_t n, int64_t i, int64_t u, int64_t k, int64_t need)
{
    int64_t x = u + 1;
    if (need <= 0)
        return u;
    while (k + 1 < m && starts[k + 1] <= x)
        k++;
    for (;;) {
        int64_t weight = w[k * n + i];
        int64_t end = k + 1 < m ? starts[k + 1] : INF;
        if (weight > 0) {
            int64_t steps = (need + weight - 1) / weight;
            if (steps <= end - x)
                return x + steps - 1;
            need -= weight * (end - x);
        } else if (end == INF) {
            return INF;
        }
        x = end;
        k++;
    }
}

/* simulate_reference's loop; d: n scratch deadlines. 0, or -1 when a lag leaves its bounds. */
static int
run(const int64_t *w, const int64_t *starts, int64_t m, int64_t n, int64_t T, int64_t S, int64_t u0, int64_t u1,
    int64_t *lam, int64_t *cnt, int64_t *d, int32_t *src, int64_t *idx, int64_t every, int64_t *ck_lam, int64_t *ck_cnt)
{
    int64_t lo = 0, hi = m - 1, k, left = every;
    const int64_t *row;
    while (lo < hi) { /* the last piece starting at or before u0 */
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (starts[mid] <= u0)
            lo = mid;
        else
            hi = mid - 1;
    }
    k = lo;
    row = w + k * n;
    for (int64_t i = 0; i < n; i++)
        d[i] = due(w, starts, m, n, i, u0 - 1, k, T - S + 1 - lam[i]);
    for (int64_t u = u0; u < u1; u++) {
        int64_t best = -1, bd = 0;
        while (k + 1 < m && starts[k + 1] <= u) {
            k++;
            row = w + k * n;
        }
        for (int64_t i = 0; i < n; i++) {
            int64_t l = lam[i] + row[i];
            lam[i] = l;
            if (l > LAM_MAX)
                return -1;
            if (l >= S && (best < 0 || d[i] < bd)) {
                best = i;
                bd = d[i];
            }
        }
        if (best < 0)
            return -1; /* unreachable: the lags sum to T >= n * S here */
        lam[best] -= T;
        if (src)
            src[u - u0] = (int32_t)best;
        if (idx)
            idx[u - u0] = cnt[best];
        cnt[best]++;
        d[best] = due(w, starts, m, n, best, u, k, T - S + 1 - lam[best]);
        if (every && --left == 0) {
            int64_t r = (u + 1 - u0) / every - 1;
            memcpy(ck_lam + r * n, lam, (size_t)n * sizeof(int64_t));
            memcpy(ck_cnt + r * n, cnt, (size_t)n * sizeof(int64_t));
            left = every;
        }
    }
    return 0;
}

PyDoc_STRVAR(simulate_doc,
"simulate(w, starts, T, S, u0, u1, lam, cnt, src, idx, every, ck_lam, ck_cnt)\n"
"\n"
"slipstream.sequences.interleave.simulate_reference, compiled: run positions\n"
"u0..u1-1 from the state (lam, cnt: int64, n each, updated in place). w: int64\n"
"(m*n) rows of weights summing to T; starts: int64 (m), 0 first, increasing.\n"
"src (int32) and idx (int64): empty, or u1-u0 outputs; every > 0: the state\n"
"after every `every` positions into ck_lam and ck_cnt (int64 rows of n).");

static PyObject *
simulate(PyObject *self, PyObject *args)
{
    PyObject *o[9];
    long long T, S, u0, u1, every;
    Py_buffer v[8];
    const char *names[8] = {"w", "starts", "lam", "cnt", "src", "idx", "ck_lam", "ck_cnt"};
    int64_t m, n, steps, *d = NULL;
    int rc = 0;
    (void)self;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "OOLLLLOOOOLOO", &o[0], &o[1], &T, &S, &u0, &u1, &o[2], &o[3], &o[4], &o[5], &every, &o[6], &o[7]))
        return NULL;
    for (int j = 0; j < 8; j++)
        if (get_ints(o[j], &v[j], j >= 2, j == 4 ? 4 : 8, j == 4 ? I32 : I64, names[j]) < 0)
            goto done;
    m = v[1].len / 8;
    n = v[2].len / 8;
    steps = u1 - u0;
    if (m < 1 || n < 1 || n > INT32_MAX || v[0].len / 8 != m * n || v[3].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "simulate: w must hold len(starts) rows of len(lam) weights, cnt len(lam) counts");
        goto done;
    }
    if (T < 1 || T > T_MAX || S < 1 || S > T / n || u0 < 0 || u1 < u0 || u1 > POS_MAX || every < 0) {
        PyErr_Format(PyExc_ValueError, "simulate: bad T %lld, S %lld, positions %lld..%lld or every %lld", T, S, u0, u1, every);
        goto done;
    }
    if ((v[4].len && v[4].len / 4 != steps) || (v[5].len && v[5].len / 8 != steps)
        || (every && (v[6].len / 8 < (steps / every) * n || v[7].len / 8 < (steps / every) * n))) {
        PyErr_SetString(PyExc_ValueError, "simulate: src and idx must be empty or hold u1-u0 entries, ck_lam and ck_cnt (u1-u0)//every rows");
        goto done;
    }
    {
        const int64_t *w = v[0].buf, *starts = v[1].buf, *lam = v[2].buf, *cnt = v[3].buf;
        int64_t lamsum = 0;
        if (starts[0] != 0) {
            PyErr_SetString(PyExc_ValueError, "simulate: starts[0] must be 0");
            goto done;
        }
        for (int64_t k = 0; k < m; k++) {
            int64_t sum = 0;
            if (k && starts[k] <= starts[k - 1]) {
                PyErr_Format(PyExc_ValueError, "simulate: starts must increase (piece %lld)", (long long)k);
                goto done;
            }
            for (int64_t i = 0; i < n; i++) {
                if (w[k * n + i] < 0 || w[k * n + i] > T) {
                    PyErr_Format(PyExc_ValueError, "simulate: weight %lld of piece %lld is not in 0..T", (long long)i, (long long)k);
                    goto done;
                }
                sum += w[k * n + i];
            }
            if (sum != T) {
                PyErr_Format(PyExc_ValueError, "simulate: the weights of piece %lld sum to %lld, not T", (long long)k, (long long)sum);
                goto done;
            }
        }
        for (int64_t i = 0; i < n; i++) {
            if (lam[i] < -T || lam[i] > T || cnt[i] < 0 || cnt[i] > POS_MAX) {
                PyErr_Format(PyExc_ValueError, "simulate: the state of source %lld (lag %lld, count %lld) is out of bounds",
                             (long long)i, (long long)lam[i], (long long)cnt[i]);
                goto done;
            }
            lamsum += lam[i];
        }
        if (lamsum != 0) {
            PyErr_SetString(PyExc_ValueError, "simulate: the lags must sum to 0");
            goto done;
        }
    }
    d = PyMem_Malloc((size_t)n * sizeof(int64_t));
    if (d == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = run(v[0].buf, v[1].buf, m, n, T, S, u0, u1, v[2].buf, v[3].buf, d, v[4].len ? v[4].buf : NULL,
             v[5].len ? v[5].buf : NULL, every, v[6].buf, v[7].buf);
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

static inline uint64_t
mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int64_t
permute_one(uint64_t y, uint64_t n, uint64_t key)
{
    uint64_t v = (n < 4 ? 4 : n) - 1, rk[ROUNDS];
    int bits = 0, lo_bits;
    uint64_t hi_mask, lo_mask;
    while (v) {
        bits++;
        v >>= 1;
    }
    lo_bits = bits / 2;
    hi_mask = ((uint64_t)1 << (bits - lo_bits)) - 1;
    lo_mask = ((uint64_t)1 << lo_bits) - 1;
    for (int r = 0; r < ROUNDS; r++)
        rk[r] = mix64(key + (uint64_t)(r + 1) * GOLDEN);
    do {
        uint64_t hi = y >> lo_bits, lo = y & lo_mask;
        for (int r = 0; r < ROUNDS; r++) {
            if (r % 2 == 0)
                hi ^= mix64(lo ^ rk[r]) & hi_mask;
            else
                lo ^= mix64(hi ^ rk[r]) & lo_mask;
        }
        y = (hi << lo_bits) | lo;
    } while (y >= n);
    return (int64_t)y;
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
            out[j] = permute_one((uint64_t)x[j], (uint64_t)n[j], keys[j]);
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
            uint64_t key = mix64(keys[src[j]] ^ mix64((pass + 1) * GOLDEN));
            out[j] = permute_one((uint64_t)(c[j] % L), (uint64_t)L, key);
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
    {"permute", permute, METH_VARARGS, permute_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_mixing", "The compiled kernels of ss.mix.", -1, methods};

PyMODINIT_FUNC
PyInit__mixing(void)
{
    return PyModule_Create(&module);
}
