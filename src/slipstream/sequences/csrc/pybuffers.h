/*
 * Buffer helpers shared by the sequences extensions (_packing, _mixing):
 * argument buffers are taken, checked and released here before any kernel
 * runs without the GIL.
 */
#ifndef SLIPSTREAM_PYBUFFERS_H
#define SLIPSTREAM_PYBUFFERS_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* Buffer format characters of signed and unsigned 64-bit integers. */
#define I64 "lq"
#define U64 "LQ"

/*
 * Take a C-contiguous buffer of `itemsize`-byte integers whose format is one
 * of the characters in `kinds`, aligned to `itemsize` (writable when asked).
 * 0 on success; -1 with TypeError (naming `name`) or the buffer error set,
 * and view->obj NULL, otherwise.
 */
static inline int
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

/* Release the first `n` views that hold a buffer (views zeroed beforehand are skipped). */
static inline void
release_all(Py_buffer *views, int n)
{
    for (int k = 0; k < n; k++)
        if (views[k].obj != NULL)
            PyBuffer_Release(&views[k]);
}

#endif
