/*
 * _roijpeg: the Python face of slipstream's compiled image code (csrc/):
 * region-of-interest JPEG decoding (csrc/roi.c), Pillow's resampling
 * (csrc/resample.c) and whole image tasks (csrc/task.c) that decode, crop,
 * resize, mirror and lay out a chunk of a batch in one call, without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <string.h>

#include "csrc/roi.h"
#include "csrc/resample.h"
#include "csrc/place.h"
#include "csrc/task.h"

/* ---------------------------------------------------------------- Python */

PyDoc_STRVAR(decode_region_doc,
"decode_region(data, top, left, height, width, out, fast=False, gray=False,\n"
"              scale=1, margin=2, whole=False, check_rest=True)\n"
"    -> (row0, col0, rows, cols)\n"
"\n"
"Decode rows top..top+height-1 and at least columns left..left+width-1 of\n"
"the JPEG `data` into the writable buffer `out`, as `rows` rows of `cols`\n"
"RGB (or, with gray=True, GRAY) pixels, C-contiguous. The decoded region\n"
"is image[row0:row0+rows, col0:col0+cols]; the window is\n"
"region[top-row0 : top-row0+height, left-col0 : left-col0+width].\n"
"\n"
"cols <= width + 2*margin + iMCU width - 1, so `out` of\n"
"height * (width + 2*margin + 32) * channels bytes always suffices.\n"
"scale (1, 2, 4, 8) selects DCT scaling by 1/scale; all coordinates are\n"
"in the scaled image. fast=True uses the integer fast IDCT and simple\n"
"(non-fancy) chroma upsampling. margin widens the band on both sides so\n"
"edge pixels match a full decode (>= 2 for exactness with fancy upsampling).\n"
"With whole=True, `out` holds the whole (scaled) image, H x W x channels, and\n"
"the decoded rows and columns are written where they belong in it; the\n"
"rest of `out` is left as it was.\n"
"Raises ValueError on corrupt or truncated data anywhere in the file, also\n"
"below the window unless check_rest=False (for bytes already seen to decode\n"
"strictly: the rows below are then not read at all)\n"
"(every libjpeg warning is an error, as in simplejpeg's\n"
"strict decode), unsupported colorspaces (CMYK/YCCK), an out-of-bounds\n"
"window or a too-small `out`; `out` may then hold part of the window.\n"
"Raises NotImplementedError for a progressive JPEG with scans missing\n"
"(libjpeg smooths its blocks, differently by version): decode it whole.");

static PyObject *
decode_region(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"data", "top", "left", "height", "width", "out",
                             "fast", "gray", "scale", "margin", "whole", "check_rest", NULL};
    Py_buffer data = {0}, out = {0};
    roi_job job;
    int rc;

    (void)self;
    memset(&job, 0, sizeof(job));
    job.scale = 1;
    job.margin = 2;
    job.check_rest = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*llllw*|ppiipp", kwlist,
                                     &data, &job.top, &job.left, &job.height,
                                     &job.width, &out, &job.fast, &job.gray,
                                     &job.scale, &job.margin, &job.whole, &job.check_rest))
        return NULL;

    if (job.top < 0 || job.left < 0 || job.height <= 0 || job.width <= 0) {
        PyErr_SetString(PyExc_ValueError,
                        "need top >= 0, left >= 0, height > 0, width > 0");
        goto done;
    }
    if (job.scale != 1 && job.scale != 2 && job.scale != 4 && job.scale != 8) {
        PyErr_SetString(PyExc_ValueError, "scale must be 1, 2, 4 or 8");
        goto done;
    }
    if (job.margin < 0) {
        PyErr_SetString(PyExc_ValueError, "margin must be >= 0");
        goto done;
    }
    if ((unsigned long long)data.len > (unsigned long long)(unsigned long)-1) {
        PyErr_SetString(PyExc_ValueError, "data too large");
        goto done;
    }
    job.data = (const unsigned char *)data.buf;
    job.size = (unsigned long)data.len;
    job.out = (unsigned char *)out.buf;
    job.out_len = out.len;

    Py_BEGIN_ALLOW_THREADS
    rc = roi_decode(&job);
    Py_END_ALLOW_THREADS

    if (rc != 0) {
        PyErr_SetString(job.incomplete ? PyExc_NotImplementedError : PyExc_ValueError, job.msg);
        goto done;
    }

done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (PyErr_Occurred())
        return NULL;
    return Py_BuildValue("(llll)", job.row0, job.col0, job.rows, job.cols);
}

PyDoc_STRVAR(read_header_doc,
"read_header(data, scale=1) -> (height, width, components, colorspace)\n"
"\n"
"Output size at DCT scale 1/scale, number of components in the file and\n"
"libjpeg's J_COLOR_SPACE code of the file (1 gray, 2 RGB, 3 YCbCr,\n"
"4 CMYK, 5 YCCK). Raises ValueError on a corrupt header (libjpeg warnings\n"
"about the header are errors too).");


static PyObject *
read_header(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"data", "scale", NULL};
    Py_buffer data = {0};
    roi_header hdr;
    int scale = 1, rc;

    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|i", kwlist, &data,
                                     &scale))
        return NULL;
    if (scale != 1 && scale != 2 && scale != 4 && scale != 8) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "scale must be 1, 2, 4 or 8");
        return NULL;
    }
    memset(&hdr, 0, sizeof(hdr));
    rc = roi_read_header((const unsigned char *)data.buf,
                         (unsigned long)data.len, scale, &hdr);
    PyBuffer_Release(&data);
    if (rc != 0) {
        PyErr_Format(PyExc_ValueError, "JPEG header error: %s", hdr.msg);
        return NULL;
    }
    return Py_BuildValue("(kkii)", hdr.height, hdr.width, hdr.components,
                         hdr.colorspace);
}

PyDoc_STRVAR(run_task_doc,
"run_task(addrs, sizes, codecs, shapes, factors, regions, edges, flips, marks,\n"
"         rows, out, row_bytes, out_h, out_w, channels, chw, dtype, lut,\n"
"         box_filter, fast, start) -> (stop, message)\n"
"\n"
"Private: images/imagetasks.py's one call per chunk of a batch (csrc/task.h). The\n"
"per-sample arguments are C-contiguous buffers of n entries: uint64 addresses\n"
"and sizes of the bytes (the caller keeps them alive), uint8 codecs (0 raw,\n"
"1 jpeg), int32 (H, W, C) stored shapes, int32 DCT factors, int64 (top, left,\n"
"rows, cols) decode regions, float32 (top, bottom, left, right) windows, uint8\n"
"flips, uint8 marks (read and updated), int64 rows. `out` receives sample i\n"
"at rows[i] * row_bytes; dtype 0 uint8, 1 float32, 2 float16 (through `lut`, C x 256\n"
"float32 or uint16 bits). Runs samples start.. without the GIL and returns\n"
"the position it stopped at (n when all are done) and why, and the seconds\n"
"it spent decoding, and resampling and writing.");

static int
task_buffer(Py_buffer *view, Py_ssize_t n, Py_ssize_t itemsize, Py_ssize_t per, const char *name)
{
    if (view->len != n * itemsize * per) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, expected %zd", name, view->len, n * itemsize * per);
        return -1;
    }
    return 0;
}

static PyObject *
run_task(PyObject *self, PyObject *args)
{
    Py_buffer addrs = {0}, sizes = {0}, codecs = {0}, shapes = {0}, factors = {0}, regions = {0};
    Py_buffer edges = {0}, flips = {0}, marks = {0}, rows = {0}, out = {0}, lut = {0};
    Py_ssize_t n, row_bytes, start, i;
    ss_task task;
    int stop = 0, ok = 0;

    (void)self;
    memset(&task, 0, sizeof(task));
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*w*y*w*niiiiiy*iin", &addrs, &sizes, &codecs, &shapes, &factors,
                          &regions, &edges, &flips, &marks, &rows, &out, &row_bytes, &task.out_h, &task.out_w,
                          &task.channels, &task.chw, &task.dtype, &lut, &task.box_filter, &task.fast, &start))
        return NULL;
    n = codecs.len;
    if (task_buffer(&addrs, n, 8, 1, "addrs") || task_buffer(&sizes, n, 8, 1, "sizes") ||
        task_buffer(&shapes, n, 4, 3, "shapes") || task_buffer(&factors, n, 4, 1, "factors") ||
        task_buffer(&regions, n, 8, 4, "regions") || task_buffer(&edges, n, 4, 4, "edges") ||
        task_buffer(&flips, n, 1, 1, "flips") || task_buffer(&marks, n, 1, 1, "marks") ||
        task_buffer(&rows, n, 8, 1, "rows"))
        goto done;
    if (task.channels != 1 && task.channels != 3) {
        PyErr_SetString(PyExc_ValueError, "run_task: channels must be 1 or 3");
        goto done;
    }
    if (task.out_h < 1 || task.out_w < 1 || task.dtype < 0 || task.dtype > 2 || start < 0 || start > n) {
        PyErr_SetString(PyExc_ValueError, "run_task: bad output size, dtype or start");
        goto done;
    }
    if (row_bytes < (Py_ssize_t)task.out_h * task.out_w * task.channels * (task.dtype == 0 ? 1 : task.dtype == 1 ? 4 : 2)) {
        PyErr_SetString(PyExc_ValueError, "run_task: row_bytes is too small for a row");
        goto done;
    }
    for (i = 0; i < n; i++) {
        int64_t row = ((const int64_t *)rows.buf)[i];
        if (row < 0 || row >= out.len / row_bytes) {
            PyErr_Format(PyExc_ValueError, "run_task: row %lld is outside the %zd rows of out", (long long)row, out.len / row_bytes);
            goto done;
        }
    }
    if (task.dtype != 0 && lut.len != (Py_ssize_t)task.channels * 256 * (task.dtype == 1 ? 4 : 2)) {
        PyErr_SetString(PyExc_ValueError, "run_task: lut must hold channels x 256 values of the output dtype");
        goto done;
    }
    task.addrs = (const uint64_t *)addrs.buf;
    task.sizes = (const uint64_t *)sizes.buf;
    task.codecs = (const uint8_t *)codecs.buf;
    task.shapes = (const int32_t *)shapes.buf;
    task.factors = (const int32_t *)factors.buf;
    task.regions = (const int64_t *)regions.buf;
    task.edges = (const float *)edges.buf;
    task.flips = (const uint8_t *)flips.buf;
    task.marks = (uint8_t *)marks.buf;
    task.rows = (const int64_t *)rows.buf;
    task.out = (uint8_t *)out.buf;
    task.row_bytes = (size_t)row_bytes;
    task.lut = lut.buf;

    Py_BEGIN_ALLOW_THREADS
    stop = ss_run_task(&task, (int)start, (int)n);
    Py_END_ALLOW_THREADS
    ok = 1;

done:
    PyBuffer_Release(&addrs);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&codecs);
    PyBuffer_Release(&shapes);
    PyBuffer_Release(&factors);
    PyBuffer_Release(&regions);
    PyBuffer_Release(&edges);
    PyBuffer_Release(&flips);
    PyBuffer_Release(&marks);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&out);
    PyBuffer_Release(&lut);
    if (!ok)
        return NULL;
    return Py_BuildValue("(isdd)", stop, task.msg, task.decode_s, task.resample_s);
}

PyDoc_STRVAR(place_doc,
"place(shapes, rows, keys, columns, counters, program, jpeg, exact, factor, region,\n"
"      edges, flip, out_hw, valid)\n"
"\n"
"Private: images/imagetasks.py's windows and placements of a task's n samples\n"
"(csrc/place.h): int32 (n, 3) stored shapes; the draws' inputs (core/draws.py's\n"
"Draws.counters: uint64 rows (n), uint64 stream keys, int64 and uint64 per\n"
"column); float64 (ops, SS_OP_WORDS) program; uint8 jpeg flags; writes int32\n"
"factors, int64 (n, 4) regions, float32 (n, 4) edges, uint8 flips, int64 (n, 2)\n"
"output sizes and uint8 valid flags.");

static PyObject *
place(PyObject *self, PyObject *args)
{
    Py_buffer shapes = {0}, rows = {0}, keys = {0}, columns = {0}, counters = {0}, program = {0}, jpeg = {0};
    Py_buffer factor = {0}, region = {0}, edges = {0}, flip = {0}, out_hw = {0}, valid = {0};
    Py_ssize_t n, ucols, nkeys, nops, i;
    int exact, ok = 0;
    double *u = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*pw*w*w*w*w*w*", &shapes, &rows, &keys, &columns, &counters, &program, &jpeg,
                          &exact, &factor, &region, &edges, &flip, &out_hw, &valid))
        return NULL;
    n = jpeg.len;
    nops = program.len / (Py_ssize_t)(SS_OP_WORDS * sizeof(double));
    ucols = columns.len / (Py_ssize_t)sizeof(int64_t);
    nkeys = keys.len / (Py_ssize_t)sizeof(uint64_t);
    if (task_buffer(&shapes, n, 4, 3, "shapes") || task_buffer(&rows, n, 8, 1, "rows") || task_buffer(&keys, nkeys, 8, 1, "keys") ||
        task_buffer(&columns, ucols, 8, 1, "columns") || task_buffer(&counters, ucols, 8, 1, "counters") ||
        task_buffer(&program, nops, 8, SS_OP_WORDS, "program") || task_buffer(&factor, n, 4, 1, "factor") ||
        task_buffer(&region, n, 8, 4, "region") || task_buffer(&edges, n, 4, 4, "edges") ||
        task_buffer(&flip, n, 1, 1, "flip") || task_buffer(&out_hw, n, 8, 2, "out_hw") || task_buffer(&valid, n, 1, 1, "valid"))
        goto done;
    for (i = 0; i < ucols; i++) {
        int64_t c = ((const int64_t *)columns.buf)[i];
        if (c < 0 || c >= nkeys) {
            PyErr_SetString(PyExc_ValueError, "place: a column's stream has no key");
            goto done;
        }
    }
    for (i = 0; i < nops && n > 0; i++) {  /* the ops are known, their sizes sane, their draws inside u */
        const double *a = (const double *)program.buf + i * SS_OP_WORDS;
        int kind = a[0] == SS_RRC ? SS_RRC : a[0] == SS_RESIZE ? SS_RESIZE : a[0] == SS_CENTER ? SS_CENTER : a[0] == SS_FLIP ? SS_FLIP : 0;
        int draws = kind == SS_RRC ? 22 : kind == SS_FLIP ? 1 : 0, k;
        int sizes = kind == SS_RRC ? 2 : kind == SS_FLIP ? 0 : 3;  /* a[2..]: sizes, 0 where unused */
        int good = kind != 0 && a[1] >= 0 && a[1] == floor(a[1]) && a[1] + draws <= (double)ucols;
        for (k = 2; k < 2 + sizes; k++)
            good = good && a[k] >= 0 && a[k] <= 2147483647.0 && a[k] == floor(a[k]);
        if (kind == SS_RRC)
            good = good && a[2] >= 1 && a[3] >= 1 && a[8] >= 0 && a[8] <= 64 && a[8] == floor(a[8]);
        if (!good) {
            PyErr_SetString(PyExc_ValueError, "place: an op of the program is not a known op with sane sizes and draws inside u");
            goto done;
        }
    }
    u = (double *)PyMem_RawMalloc(sizeof(double) * (size_t)(ucols > 0 ? ucols : 1));
    if (u == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < n; i++) {
        const int32_t *shape = (const int32_t *)shapes.buf + 3 * i;
        ss_draws(((const uint64_t *)rows.buf)[i], (const uint64_t *)keys.buf, (const int64_t *)columns.buf,
                 (const uint64_t *)counters.buf, (int)ucols, u);
        ((uint8_t *)valid.buf)[i] = (uint8_t)(shape[0] >= 1 && shape[1] >= 1 &&
            ss_place(shape[0], shape[1], u, (const double *)program.buf, (int)nops, ((const uint8_t *)jpeg.buf)[i], exact,
                     (int32_t *)factor.buf + i, (int64_t *)region.buf + 4 * i, (float *)edges.buf + 4 * i,
                     (uint8_t *)flip.buf + i, (int64_t *)out_hw.buf + 2 * i));
    }
    Py_END_ALLOW_THREADS
    ok = 1;

done:
    PyMem_RawFree(u);
    PyBuffer_Release(&shapes);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&keys);
    PyBuffer_Release(&columns);
    PyBuffer_Release(&counters);
    PyBuffer_Release(&program);
    PyBuffer_Release(&jpeg);
    PyBuffer_Release(&factor);
    PyBuffer_Release(&region);
    PyBuffer_Release(&edges);
    PyBuffer_Release(&flip);
    PyBuffer_Release(&out_hw);
    PyBuffer_Release(&valid);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef roi_methods[] = {
    {"place", place, METH_VARARGS, place_doc},
    {"run_task", run_task, METH_VARARGS, run_task_doc},
    {"decode_region", (PyCFunction)(void (*)(void))decode_region,
     METH_VARARGS | METH_KEYWORDS, decode_region_doc},
    {"read_header", (PyCFunction)(void (*)(void))read_header,
     METH_VARARGS | METH_KEYWORDS, read_header_doc},
    {NULL, NULL, 0, NULL}
};

static int
roi_exec(PyObject *m)
{
    return PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION_NUMBER", LIBJPEG_TURBO_VERSION_NUMBER);
}

/* No process-wide mutable state: every call keeps its libjpeg objects and
   error manager on its stack, csrc/task.c's per-thread scratch hangs off a
   pthread key made under pthread_once, and libjpeg-turbo (2.x) keeps its SIMD
   detection thread-local. So the module runs without the GIL where the
   interpreter is free-threaded. The callers' buffers are held as Py_buffer
   views for the whole call (which pins a bytearray's size); their contents
   must not be written by other threads while a call runs, and the memory
   behind run_task's raw addresses is the caller's to keep alive. */
static PyModuleDef_Slot roi_slots[] = {
    {Py_mod_exec, roi_exec},
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL}
};

static struct PyModuleDef roi_module = {
    PyModuleDef_HEAD_INIT, "_roijpeg",
    "Region-of-interest JPEG decoding (libjpeg-turbo crop/skip scanlines).",
    0, roi_methods, roi_slots, NULL, NULL, NULL
};

PyMODINIT_FUNC
PyInit__roijpeg(void)
{
    return PyModuleDef_Init(&roi_module);
}
