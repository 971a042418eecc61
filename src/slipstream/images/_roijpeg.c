/*
 * _roijpeg: the Python face of slipstream's compiled image code (csrc/):
 * region-of-interest JPEG decoding (csrc/roi.c), Pillow's resampling
 * (csrc/resample.c) and whole image tasks (csrc/task.c) that decode, crop,
 * resize, mirror and lay out a chunk of a batch in one call, without the GIL,
 * and whole-image JPEG decoding and encoding (csrc/codec.c).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "csrc/roi.h"
#include "csrc/resample.h"
#include "csrc/place.h"
#include "csrc/task.h"
#include "csrc/codec.h"
#include "csrc/pixel.h"
#include "csrc/mixup.h"

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
"         box_filter, fast, start, *, steps=None) -> (stop, message)\n"
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
"it spent decoding, and resampling and writing. `steps`: the pixel ops' steps\n"
"of each sample, C-contiguous float64 (n, S, 12) (csrc/pixel.h), run on its\n"
"uint8 pixels before they are laid out (a step that cannot apply stops there,\n"
"with its ValueError's text as the message).");

static int
task_buffer(Py_buffer *view, Py_ssize_t n, Py_ssize_t itemsize, Py_ssize_t per, const char *name)
{
    if (view->len != n * itemsize * per) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, expected %zd", name, view->len, n * itemsize * per);
        return -1;
    }
    return 0;
}

static Py_ssize_t steps_view(PyObject *obj, Py_buffer *view, const char *name);

static PyObject *
run_task(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "steps", NULL};
    Py_buffer addrs = {0}, sizes = {0}, codecs = {0}, shapes = {0}, factors = {0}, regions = {0};
    Py_buffer edges = {0}, flips = {0}, marks = {0}, rows = {0}, out = {0}, lut = {0}, steps = {0};
    PyObject *steps_obj = Py_None;
    Py_ssize_t n, row_bytes, start, i;
    ss_task task;
    int stop = 0, ok = 0;

    (void)self;
    memset(&task, 0, sizeof(task));
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*y*y*y*y*y*y*y*w*y*w*niiiiiy*iin|$O", kwlist, &addrs, &sizes, &codecs,
                                     &shapes, &factors, &regions, &edges, &flips, &marks, &rows, &out, &row_bytes, &task.out_h,
                                     &task.out_w, &task.channels, &task.chw, &task.dtype, &lut, &task.box_filter, &task.fast,
                                     &start, &steps_obj))
        return NULL;
    n = codecs.len;
    if (steps_obj != Py_None) {
        Py_ssize_t count = steps_view(steps_obj, &steps, "steps");
        if (count < 0)
            goto done;
        if (n > 0 && (count % n != 0 || count / n > INT32_MAX)) {
            PyErr_Format(PyExc_ValueError, "run_task: steps holds %zd steps, not the same number for each of the %zd samples", count, n);
            goto done;
        }
        task.n_steps = n > 0 ? (int)(count / n) : 0;
        task.steps = (const double *)steps.buf;
    }
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
    if (task.out_h < 1 || task.out_w < 1 || task.out_h > (1 << 28) || task.out_w > (1 << 28) || task.dtype < 0 || task.dtype > 2 ||
        start < 0 || start > n) {  /* (sides bounded as the resampler's: the row size below cannot overflow) */
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
    PyBuffer_Release(&steps);
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

PyDoc_STRVAR(resample_doc,
"resample(src, box, out, flip=False, filter='bilinear', chw=False, scale=None, offset=None)\n"
"    -> None\n"
"\n"
"Pillow's antialiased resampling of one image (csrc/resample.h), without the\n"
"GIL: crop `box` (top, left, height, width in source pixels, fractions\n"
"allowed; its edges rounded to float32 as Pillow receives them, then checked\n"
"to lie inside the image) from `src`, a C-contiguous uint8 (H, W, C) buffer\n"
"with C 1 or 3, resize it to `out`'s size with filter 'bilinear' or 'box',\n"
"mirror it left-right with flip=True, and write it into `out`: a writable\n"
"C-contiguous (oh, ow, C), or with chw=True (C, oh, ow), buffer of uint8,\n"
"float32 or float16, not overlapping `src`. Float outputs hold\n"
"float32(v) * scale[c] + offset[c] computed in float32 (then rounded to\n"
"float16 half to even); `scale` and `offset` are None (1 and 0) or C-contiguous\n"
"float32 buffers of 1 or C values, for float outputs only. The uint8 result is\n"
"Image.resize((ow, oh), BILINEAR|BOX, box=(left, top, left + width,\n"
"top + height)) bit for bit. Raises TypeError for a wrong type or dtype,\n"
"ValueError for a wrong shape, layout, box, filter or non-contiguous buffer,\n"
"MemoryError when scratch memory runs out; `out` is untouched then.");

/* Each thread keeps the resampler's scratch and a row for float outputs from
   one call to the next; freed when the thread ends. */
typedef struct {
    ss_scratch work, result;
} resample_scratch;

static pthread_key_t resample_key;
static pthread_once_t resample_once = PTHREAD_ONCE_INIT;
static int resample_key_ok;

static void
free_resample_scratch(void *p)
{
    resample_scratch *s = (resample_scratch *)p;
    ss_scratch_free(&s->work);
    ss_scratch_free(&s->result);
    free(s);
}

static void
make_resample_key(void)
{
    resample_key_ok = pthread_key_create(&resample_key, free_resample_scratch) == 0;
}

/* This thread's scratch, with `result` at least `res_bytes` long (NULL when out of memory). */
static resample_scratch *
my_resample_scratch(size_t res_bytes)
{
    resample_scratch *s;
    pthread_once(&resample_once, make_resample_key);
    if (!resample_key_ok)
        return NULL;
    s = (resample_scratch *)pthread_getspecific(resample_key);
    if (s == NULL) {
        s = (resample_scratch *)calloc(1, sizeof(*s));
        if (s == NULL || pthread_setspecific(resample_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    if (s->result.size < res_bytes) {
        void *block = malloc(res_bytes);
        if (block == NULL)
            return NULL;
        free(s->result.block);
        s->result.block = block;
        s->result.size = res_bytes;
    }
    return s;
}

/* float32 bits -> float16 bits, rounded half to even as NumPy's astype rounds
   (overflow to inf; NaN keeps the top of its payload). */
static uint16_t
half_bits(uint32_t f)
{
    uint32_t sign = (f >> 16) & 0x8000u, a = f & 0x7FFFFFFFu;
    uint32_t q, r;
    if (a >= 0x7F800000u) {
        if (a == 0x7F800000u)
            return (uint16_t)(sign | 0x7C00u);
        q = 0x7C00u + ((a & 0x7FFFFFu) >> 13);
        return (uint16_t)(sign | (q == 0x7C00u ? q + 1 : q));
    }
    if (a >= 0x47800000u)
        return (uint16_t)(sign | 0x7C00u);
    if (a < 0x38800000u) {
        uint32_t m = (a & 0x7FFFFFu) | 0x800000u, shift, halfway;
        if (a < 0x33000000u)
            return (uint16_t)sign;
        shift = 126u - (a >> 23);
        q = m >> shift;
        r = m & ((1u << shift) - 1u);
        halfway = 1u << (shift - 1u);
        if (r > halfway || (r == halfway && (q & 1u)))
            q += 1;
        return (uint16_t)(sign | q);
    }
    q = (((a >> 23) - 112u) << 10) | ((a & 0x7FFFFFu) >> 13);
    r = a & 0x1FFFu;
    if (r > 0x1000u || (r == 0x1000u && (q & 1u)))
        q += 1;
    return (uint16_t)(sign | q);
}

/* The element type of a buffer: 'B', 'f' or 'e' for native uint8, float32, float16; 0 otherwise. */
static char
buffer_kind(const Py_buffer *view)
{
    const char *format = view->format == NULL ? "B" : view->format;
    const uint16_t probe = 1;
    if (*format == '@' || *format == '=' || (*format == '<' && *(const uint8_t *)&probe == 1))
        format++;
    if (format[0] == '\0' || format[1] != '\0')
        return 0;
    if ((format[0] == 'B' && view->itemsize == 1) || (format[0] == 'f' && view->itemsize == 4) ||
        (format[0] == 'e' && view->itemsize == 2))
        return format[0];
    return 0;
}

/* An `out` buffer that a call writes: writable, C-contiguous, not overlapping the `src_name` input
   (Python's ValueError naming what is wrong, and -1, otherwise). */
static int
check_out_buffer(const Py_buffer *out, const Py_buffer *src, const char *src_name)
{
    if (out->readonly) {
        PyErr_SetString(PyExc_ValueError, "out must be writable, got a read-only array");
        return -1;
    }
    if (!PyBuffer_IsContiguous(out, 'C')) {
        PyErr_SetString(PyExc_ValueError, "out must be C-contiguous, got a strided array");
        return -1;
    }
    if ((const char *)out->buf < (const char *)src->buf + src->len && (const char *)src->buf < (const char *)out->buf + out->len) {
        PyErr_Format(PyExc_ValueError, "out overlaps %s", src_name);
        return -1;
    }
    return 0;
}

/* Gets a strided view of `obj` as `view`, naming the argument in the error. */
static int
get_view(PyObject *obj, Py_buffer *view, const char *name, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_RECORDS_RO) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be %s (a numpy array), got %.100s", name, what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    return 0;
}

/* scale or offset: None (every channel `fallback`) or 1 or `channels` float32 values into `values`. */
static int
per_channel(PyObject *obj, int channels, float fallback, float *values, const char *name)
{
    Py_buffer view = {0};
    Py_ssize_t count;
    int c;
    if (obj == Py_None) {
        for (c = 0; c < channels; c++)
            values[c] = fallback;
        return 0;
    }
    if (get_view(obj, &view, name, "a float32 buffer") != 0)
        return -1;
    count = view.itemsize > 0 ? view.len / view.itemsize : 0;
    if (buffer_kind(&view) != 'f') {
        PyErr_Format(PyExc_TypeError, "%s must be float32, got format '%s'", name, view.format == NULL ? "B" : view.format);
        PyBuffer_Release(&view);
        return -1;
    }
    if (view.ndim > 1 || !PyBuffer_IsContiguous(&view, 'C')) {
        PyErr_Format(PyExc_ValueError, "%s must be a C-contiguous scalar or 1-D buffer, got %d dimensions", name, view.ndim);
        PyBuffer_Release(&view);
        return -1;
    }
    if (count != 1 && count != channels) {
        PyErr_Format(PyExc_ValueError, "%s must hold 1 or %d float32 values (one per channel), got %zd", name, channels, count);
        PyBuffer_Release(&view);
        return -1;
    }
    for (c = 0; c < channels; c++)
        values[c] = ((const float *)view.buf)[count == 1 ? 0 : c];
    PyBuffer_Release(&view);
    return 0;
}

/* The box (top, left, height, width) as the float32 edges (top, bottom, left, right) Pillow receives, checked. */
static int
box_edges(PyObject *box, int height, int width, float edges[4])
{
    double v[4];
    PyObject *seq;
    Py_ssize_t i;
    seq = PySequence_Check(box) && !PyUnicode_Check(box) && !PyBytes_Check(box) ? PySequence_Fast(box, "") : NULL;
    if (seq == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "box must be a sequence (top, left, height, width), got %R", box);
        return -1;
    }
    if (PySequence_Fast_GET_SIZE(seq) != 4) {
        PyErr_Format(PyExc_ValueError, "box must be (top, left, height, width), got %R", box);
        Py_DECREF(seq);
        return -1;
    }
    for (i = 0; i < 4; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (PyBool_Check(item) || PyUnicode_Check(item) || PyBytes_Check(item) ||
            ((v[i] = PyFloat_AsDouble(item)) == -1.0 && PyErr_Occurred())) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "box must hold real numbers, got %R", box);
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    for (i = 0; i < 4; i++)
        if (!isfinite(v[i])) {
            PyErr_Format(PyExc_ValueError, "box must be finite, got %R", box);
            return -1;
        }
    if (v[2] <= 0 || v[3] <= 0) {
        PyErr_Format(PyExc_ValueError, "box height and width must be > 0, got %R", box);
        return -1;
    }
    edges[0] = (float)v[0];
    edges[1] = (float)(v[0] + v[2]);
    edges[2] = (float)v[1];
    edges[3] = (float)(v[1] + v[3]);
    if (edges[0] < 0 || edges[2] < 0) {
        PyErr_Format(PyExc_ValueError, "box %R starts outside the %dx%d image", box, height, width);
        return -1;
    }
    if (!((double)edges[1] <= height && (double)edges[3] <= width)) {
        PyErr_Format(PyExc_ValueError, "box %R ends outside the %dx%d image", box, height, width);
        return -1;
    }
    if (!(edges[1] > edges[0] && edges[3] > edges[2])) {
        PyErr_Format(PyExc_ValueError, "box %R is too small to resample from", box);
        return -1;
    }
    return 0;
}

#define RESAMPLE_MAX_SIDE (1 << 28)  /* keeps the resampler's int arithmetic far from overflow */

static PyObject *
resample(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"src", "box", "out", "flip", "filter", "chw", "scale", "offset", NULL};
    PyObject *src_obj, *box, *out_obj, *filter = NULL, *scale_obj = Py_None, *offset_obj = Py_None;
    Py_buffer src = {0}, out = {0};
    int flip = 0, chw = 0, box_filter = 0, height, width, channels, out_h, out_w, dtype, rc = 0, c, v;
    char kind;
    float edges[4], scale[3], offset[3];
    float lut32[3 * 256];
    uint16_t lut16[3 * 256];
    size_t res_bytes;
    resample_scratch *scratch;
    PyObject *result = NULL;

    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|pOpOO", kwlist, &src_obj, &box, &out_obj, &flip, &filter, &chw,
                                     &scale_obj, &offset_obj))
        return NULL;
    if (get_view(src_obj, &src, "src", "a uint8 buffer") != 0)
        return NULL;
    if (get_view(out_obj, &out, "out", "a uint8, float32 or float16 buffer") != 0)
        goto done;

    if (buffer_kind(&src) != 'B') {
        PyErr_Format(PyExc_TypeError, "src must be uint8, got format '%s'", src.format == NULL ? "B" : src.format);
        goto done;
    }
    if (src.ndim != 3) {
        PyErr_Format(PyExc_ValueError, "src must have shape (H, W, C), got %d dimensions", src.ndim);
        goto done;
    }
    if (src.shape[2] != 1 && src.shape[2] != 3) {
        PyErr_Format(PyExc_ValueError, "src must have 1 or 3 channels, got %zd", src.shape[2]);
        goto done;
    }
    if (src.shape[0] < 1 || src.shape[1] < 1 || src.shape[0] > RESAMPLE_MAX_SIDE || src.shape[1] > RESAMPLE_MAX_SIDE) {
        PyErr_Format(PyExc_ValueError, "src must be 1 to %d pixels high and wide, got %zdx%zd", RESAMPLE_MAX_SIDE,
                     src.shape[0], src.shape[1]);
        goto done;
    }
    if (!PyBuffer_IsContiguous(&src, 'C')) {
        PyErr_SetString(PyExc_ValueError, "src must be C-contiguous (copy it first: numpy.ascontiguousarray)");
        goto done;
    }
    height = (int)src.shape[0];
    width = (int)src.shape[1];
    channels = (int)src.shape[2];

    kind = buffer_kind(&out);
    if (kind == 0) {
        PyErr_Format(PyExc_TypeError, "out must be uint8, float32 or float16, got format '%s'", out.format == NULL ? "B" : out.format);
        goto done;
    }
    if (out.ndim != 3) {
        PyErr_Format(PyExc_ValueError, "out must have shape %s, got %d dimensions", chw ? "(C, oh, ow)" : "(oh, ow, C)", out.ndim);
        goto done;
    }
    if ((chw ? out.shape[0] : out.shape[2]) != channels) {
        PyErr_Format(PyExc_ValueError, "out shape (%zd, %zd, %zd) does not match %s with C=%d channels of src", out.shape[0],
                     out.shape[1], out.shape[2], chw ? "(C, oh, ow)" : "(oh, ow, C)", channels);
        goto done;
    }
    if (chw ? (out.shape[1] < 1 || out.shape[2] < 1 || out.shape[1] > RESAMPLE_MAX_SIDE || out.shape[2] > RESAMPLE_MAX_SIDE)
            : (out.shape[0] < 1 || out.shape[1] < 1 || out.shape[0] > RESAMPLE_MAX_SIDE || out.shape[1] > RESAMPLE_MAX_SIDE)) {
        PyErr_Format(PyExc_ValueError, "out must be 1 to %d pixels high and wide, got shape (%zd, %zd, %zd)", RESAMPLE_MAX_SIDE,
                     out.shape[0], out.shape[1], out.shape[2]);
        goto done;
    }
    out_h = (int)(chw ? out.shape[1] : out.shape[0]);
    out_w = (int)(chw ? out.shape[2] : out.shape[1]);
    if (check_out_buffer(&out, &src, "src") < 0)
        goto done;

    if (filter == NULL || (PyUnicode_Check(filter) && PyUnicode_CompareWithASCIIString(filter, "bilinear") == 0))
        box_filter = 0;
    else if (PyUnicode_Check(filter) && PyUnicode_CompareWithASCIIString(filter, "box") == 0)
        box_filter = 1;
    else {
        PyErr_Format(PyExc_ValueError, "filter must be 'bilinear' or 'box', got %R", filter);
        goto done;
    }
    if (box_edges(box, height, width, edges) != 0)
        goto done;
    if (kind == 'B' && (scale_obj != Py_None || offset_obj != Py_None)) {
        PyErr_SetString(PyExc_ValueError, "scale/offset need a float32 or float16 out");
        goto done;
    }
    if (per_channel(scale_obj, channels, 1.0f, scale, "scale") != 0 || per_channel(offset_obj, channels, 0.0f, offset, "offset") != 0)
        goto done;

    dtype = kind == 'B' ? SS_U8 : kind == 'f' ? SS_F32 : SS_F16;
    res_bytes = (size_t)out_h * (size_t)out_w * (size_t)channels;
    Py_BEGIN_ALLOW_THREADS
    scratch = my_resample_scratch(dtype == SS_U8 ? 0 : res_bytes);
    if (scratch == NULL)
        rc = -1;
    else {
        uint8_t *res = dtype == SS_U8 ? (uint8_t *)out.buf : (uint8_t *)scratch->result.block;
        rc = ss_resample((const uint8_t *)src.buf, height, width, channels, (size_t)width * (size_t)channels, edges, out_h, out_w,
                         box_filter, flip, chw, res, &scratch->work);
        if (rc == 0 && dtype != SS_U8) {
            for (c = 0; c < channels; c++)
                for (v = 0; v < 256; v++) {
                    float value = (float)v * scale[c] + offset[c];  /* two roundings: no fused multiply-add here */
                    lut32[c * 256 + v] = value;
                    if (dtype == SS_F16) {
                        uint32_t fbits;
                        memcpy(&fbits, &value, sizeof(fbits));
                        lut16[c * 256 + v] = half_bits(fbits);
                    }
                }
            ss_write(res, res_bytes, channels, chw, (size_t)out_h * (size_t)out_w, dtype,
                     dtype == SS_F32 ? (const void *)lut32 : (const void *)lut16, out.buf);
        }
    }
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);

done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&out);
    return result;
}

/* ---------------------------------------------------------------- codec */

PyDoc_STRVAR(decode_jpeg_doc,
"decode_jpeg(data, out=None, *, colorspace='RGB', scale_denom=1, fast=False, strict=True)\n"
"    -> uint8 array (H, W, C)\n"
"\n"
"Decode the whole JPEG `data` (csrc/codec.h) as colorspace 'RGB' (C = 3) or\n"
"'GRAY' (C = 1), at DCT scale 1/scale_denom (1, 2, 4, 8: H and W are the\n"
"image's sides divided by it, rounded up), without the GIL. fast=True uses the\n"
"fast integer DCT and simple chroma upsampling; otherwise libjpeg's accurate\n"
"DCT and fancy upsampling, the pixels simplejpeg and Pillow decode with the\n"
"same libjpeg. CMYK and YCCK images are converted as simplejpeg converts them.\n"
"Returns a new array, or `out` filled: a writable C-contiguous uint8 array of\n"
"exactly that shape (TypeError or ValueError naming it otherwise).\n"
"Raises ValueError with libjpeg's message for data libjpeg cannot decode and,\n"
"with strict=True, for any libjpeg warning (truncated or corrupt data,\n"
"extraneous bytes); also before anything is allocated for a header that\n"
"declares more pixels than the bytes can encode (strict) or an image of more\n"
"than 2**31 bytes.");

/* numpy.empty((height, width, channels), "uint8") (numpy is imported by the caller's code) */
static PyObject *
new_image(unsigned long height, unsigned long width, int channels)
{
    PyObject *numpy = PyImport_ImportModule("numpy"), *image;
    if (numpy == NULL)
        return NULL;
    image = PyObject_CallMethod(numpy, "empty", "((kki)s)", height, width, channels, "uint8");
    Py_DECREF(numpy);
    return image;
}

static PyObject *
decode_jpeg(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"data", "out", "colorspace", "scale_denom", "fast", "strict", NULL};
    Py_buffer data = {0}, out = {0};
    PyObject *out_obj = Py_None, *image = NULL;
    const char *colorspace = "RGB";
    codec_decode_job job;
    int rc;

    (void)self;
    memset(&job, 0, sizeof(job));
    job.scale = 1;
    job.strict = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|O$sipp", kwlist, &data, &out_obj, &colorspace, &job.scale, &job.fast,
                                     &job.strict))
        return NULL;
    if (strcmp(colorspace, "RGB") == 0 || strcmp(colorspace, "rgb") == 0)
        job.gray = 0;
    else if (strcmp(colorspace, "GRAY") == 0 || strcmp(colorspace, "gray") == 0)
        job.gray = 1;
    else {
        PyErr_Format(PyExc_ValueError, "colorspace must be 'RGB' or 'GRAY', got '%s'", colorspace);
        goto done;
    }
    if (job.scale != 1 && job.scale != 2 && job.scale != 4 && job.scale != 8) {
        PyErr_Format(PyExc_ValueError, "scale_denom must be 1, 2, 4 or 8, got %d", job.scale);
        goto done;
    }
    if ((unsigned long long)data.len > (unsigned long long)(unsigned long)-1) {
        PyErr_SetString(PyExc_ValueError, "data too large");
        goto done;
    }
    job.data = (const unsigned char *)data.buf;
    job.size = (unsigned long)data.len;

    Py_BEGIN_ALLOW_THREADS
    rc = codec_decode(&job);  /* the header: the output's size */
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, job.msg);
        goto done;
    }

    if (out_obj == Py_None) {
        image = new_image(job.height, job.width, job.channels);
        if (image == NULL)
            goto done;
        if (PyObject_GetBuffer(image, &out, PyBUF_RECORDS) != 0)
            goto done;
    } else {
        if (get_view(out_obj, &out, "out", "a uint8 array") != 0)
            goto done;
        if (buffer_kind(&out) != 'B') {
            PyErr_Format(PyExc_TypeError, "out must be uint8, got format '%s'", out.format == NULL ? "B" : out.format);
            goto done;
        }
        if (out.ndim != 3 || out.shape[0] != (Py_ssize_t)job.height || out.shape[1] != (Py_ssize_t)job.width ||
            out.shape[2] != job.channels) {
            PyObject *found = out.ndim >= 1 && out.shape != NULL ? PyTuple_New(out.ndim) : PyTuple_New(0);
            int k;
            for (k = 0; found != NULL && out.shape != NULL && k < out.ndim; k++)
                PyTuple_SET_ITEM(found, k, PyLong_FromSsize_t(out.shape[k]));
            PyErr_Format(PyExc_ValueError, "out must have shape (%lu, %lu, %d), got %R", job.height, job.width, job.channels,
                         found == NULL ? Py_None : found);
            Py_XDECREF(found);
            goto done;
        }
        if (check_out_buffer(&out, &data, "data") < 0)
            goto done;
        image = out_obj;
        Py_INCREF(image);
    }
    job.out = (unsigned char *)out.buf;
    job.out_len = (size_t)out.len;

    Py_BEGIN_ALLOW_THREADS
    rc = codec_decode(&job);
    Py_END_ALLOW_THREADS
    if (rc != 0)
        PyErr_SetString(PyExc_ValueError, job.msg);

done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (PyErr_Occurred()) {
        Py_XDECREF(image);
        return NULL;
    }
    return image;
}

PyDoc_STRVAR(encode_jpeg_doc,
"encode_jpeg(image, quality=85, *, colorspace=None, subsampling=None, fast=False) -> bytes\n"
"\n"
"Encode a C-contiguous uint8 image, (H, W, 3) RGB or (H, W, 1) / (H, W) gray,\n"
"as a baseline JFIF JPEG (csrc/codec.h), without the GIL. colorspace ('RGB'\n"
"or 'GRAY') is the image's, checked against its channels; subsampling is\n"
"'444', '422', '420' (the default for RGB) or 'gray' (a grayscale JPEG, the\n"
"only one for a gray image; from RGB, libjpeg's luma). quality is 1..100;\n"
"fast=True uses the fast integer forward DCT (as TurboJPEG's tjCompress2,\n"
"hence simplejpeg's encode_jpeg, does below quality 96), else the accurate one.");

static PyObject *
encode_jpeg(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"image", "quality", "colorspace", "subsampling", "fast", NULL};
    Py_buffer image = {0};
    PyObject *image_obj, *result = NULL;
    const char *colorspace = NULL, *subsampling = NULL;
    codec_encode_job job;
    int rc;

    (void)self;
    memset(&job, 0, sizeof(job));
    job.quality = 85;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|i$zzp", kwlist, &image_obj, &job.quality, &colorspace, &subsampling, &job.fast))
        return NULL;
    if (get_view(image_obj, &image, "image", "a uint8 array") != 0)
        return NULL;
    if (buffer_kind(&image) != 'B') {
        PyErr_Format(PyExc_TypeError, "image must be uint8, got format '%s'", image.format == NULL ? "B" : image.format);
        goto done;
    }
    if (!(image.ndim == 2 || (image.ndim == 3 && (image.shape[2] == 1 || image.shape[2] == 3)))) {
        PyErr_Format(PyExc_ValueError, "image must have shape (H, W, 3), (H, W, 1) or (H, W), got %d dimensions%s", image.ndim,
                     image.ndim == 3 ? " with neither 1 nor 3 channels" : "");
        goto done;
    }
    if (image.shape[0] < 1 || image.shape[1] < 1 || image.shape[0] > JPEG_MAX_DIMENSION || image.shape[1] > JPEG_MAX_DIMENSION) {
        PyErr_Format(PyExc_ValueError, "image must be 1 to %d pixels high and wide (JPEG's limit), got %zdx%zd", (int)JPEG_MAX_DIMENSION,
                     image.shape[0], image.shape[1]);
        goto done;
    }
    if (!PyBuffer_IsContiguous(&image, 'C')) {
        PyErr_SetString(PyExc_ValueError, "image must be C-contiguous (copy it first: numpy.ascontiguousarray)");
        goto done;
    }
    job.height = (unsigned long)image.shape[0];
    job.width = (unsigned long)image.shape[1];
    job.channels = image.ndim == 2 ? 1 : (int)image.shape[2];
    if (colorspace != NULL) {
        int gray = strcmp(colorspace, "GRAY") == 0 || strcmp(colorspace, "gray") == 0;
        if (!gray && strcmp(colorspace, "RGB") != 0 && strcmp(colorspace, "rgb") != 0) {
            PyErr_Format(PyExc_ValueError, "colorspace must be 'RGB' or 'GRAY', got '%s'", colorspace);
            goto done;
        }
        if ((gray ? 1 : 3) != job.channels) {
            PyErr_Format(PyExc_ValueError, "colorspace '%s' needs %d channels, the image has %d", colorspace, gray ? 1 : 3, job.channels);
            goto done;
        }
    }
    if (subsampling == NULL)
        job.subsampling = job.channels == 1 ? CODEC_GRAY : CODEC_420;
    else if (strcmp(subsampling, "444") == 0)
        job.subsampling = CODEC_444;
    else if (strcmp(subsampling, "422") == 0)
        job.subsampling = CODEC_422;
    else if (strcmp(subsampling, "420") == 0)
        job.subsampling = CODEC_420;
    else if (strcmp(subsampling, "gray") == 0 || strcmp(subsampling, "GRAY") == 0 || strcmp(subsampling, "Gray") == 0)
        job.subsampling = CODEC_GRAY;
    else {
        PyErr_Format(PyExc_ValueError, "subsampling must be '444', '422', '420' or 'gray', got '%s'", subsampling);
        goto done;
    }
    if (job.channels == 1 && job.subsampling != CODEC_GRAY) {
        PyErr_Format(PyExc_ValueError, "a gray image is encoded with subsampling 'gray', got '%s'", subsampling);
        goto done;
    }
    if (job.quality < 1 || job.quality > 100) {
        PyErr_Format(PyExc_ValueError, "quality must be 1..100, got %d", job.quality);
        goto done;
    }
    job.pixels = (const unsigned char *)image.buf;

    Py_BEGIN_ALLOW_THREADS
    rc = codec_encode(&job);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, job.msg);
        goto done;
    }
    result = PyBytes_FromStringAndSize((const char *)job.jpeg, (Py_ssize_t)job.jpeg_size);
    free(job.jpeg);

done:
    PyBuffer_Release(&image);
    return result;
}


PyDoc_STRVAR(pixel_steps_doc,
"pixel_steps(image, steps) -> None\n"
"\n"
"Apply the pixel ops' steps (images/kernels/pixel_steps.py: rows of 12 float64,\n"
"an opcode and its parameters) in order to `image`, a writable C-contiguous\n"
"uint8 array (H, W, 1 or 3), in place, without the GIL. `steps` is a\n"
"C-contiguous float64 array (k, 12) or (k * 12,). The same bits as\n"
"pixel_steps.run; a step that cannot apply raises its StepError (a ValueError;\n"
"the image may then be partly modified).");

/* native float64: 'd', optionally with a byte-order prefix that is this machine's */
static int
is_float64(const Py_buffer *view)
{
    const char *format = view->format == NULL ? "B" : view->format;
    const uint16_t probe = 1;
    if (*format == '@' || *format == '=' || (*format == '<' && *(const uint8_t *)&probe == 1))
        format++;
    return format[0] == 'd' && format[1] == '\0' && view->itemsize == 8;
}

/* steps: a C-contiguous float64 (k, 12) or (k * 12,) buffer; its step count, or -1 with the error set */
static Py_ssize_t
steps_view(PyObject *obj, Py_buffer *view, const char *name)
{
    if (get_view(obj, view, name, "a float64 buffer") != 0)
        return -1;
    if (!is_float64(view)) {
        PyErr_Format(PyExc_TypeError, "%s must be float64, got format '%s'", name, view->format == NULL ? "B" : view->format);
        return -1;
    }
    if (!PyBuffer_IsContiguous(view, 'C')) {
        PyErr_Format(PyExc_ValueError, "%s must be C-contiguous, got a strided array", name);
        return -1;
    }
    if (view->len % (8 * SS_PIXEL_WORDS) != 0 || (view->ndim >= 2 && view->shape[view->ndim - 1] != SS_PIXEL_WORDS)) {
        PyErr_Format(PyExc_ValueError, "%s must hold rows of %d float64 ((k, %d) or (k * %d,)), got %zd values in %d dimensions",
                     name, SS_PIXEL_WORDS, SS_PIXEL_WORDS, SS_PIXEL_WORDS, view->len / 8, view->ndim);
        return -1;
    }
    return view->len / (8 * SS_PIXEL_WORDS);
}

/* Raises kernels.pixel_steps.StepError (a ValueError; ValueError itself when that module does not import) with `msg`. */
static void
step_error(const char *msg)
{
    PyObject *module = PyImport_ImportModule("slipstream.images.kernels.pixel_steps");
    PyObject *type = module == NULL ? NULL : PyObject_GetAttrString(module, "StepError");
    PyErr_Clear();
    PyErr_SetString(type != NULL && PyType_Check(type) ? type : PyExc_ValueError, msg);
    Py_XDECREF(type);
    Py_XDECREF(module);
}

static PyObject *
pixel_steps(PyObject *self, PyObject *args)
{
    PyObject *image_obj, *steps_obj;
    Py_buffer image = {0}, steps = {0};
    Py_ssize_t count;
    ss_scratch scratch = {NULL, 0};
    char msg[1024];
    int rc = 0, ok = 0;

    (void)self;
    if (!PyArg_ParseTuple(args, "OO:pixel_steps", &image_obj, &steps_obj))
        return NULL;
    if (get_view(image_obj, &image, "image", "a uint8 array (H, W, 1 or 3)") != 0)
        return NULL;
    if (buffer_kind(&image) != 'B') {
        PyErr_Format(PyExc_TypeError, "image must be uint8, got format '%s'", image.format == NULL ? "B" : image.format);
        goto done;
    }
    if (image.ndim != 3 || (image.shape[2] != 1 && image.shape[2] != 3)) {
        if (image.ndim == 3)
            PyErr_Format(PyExc_ValueError, "image must have shape (H, W, 1 or 3), got (%zd, %zd, %zd)", image.shape[0],
                         image.shape[1], image.shape[2]);
        else
            PyErr_Format(PyExc_ValueError, "image must have shape (H, W, 1 or 3), got %d dimensions", image.ndim);
        goto done;
    }
    if (image.shape[0] < 1 || image.shape[1] < 1 || image.shape[0] * image.shape[1] > INT32_MAX / 3 ||
        image.shape[0] > INT32_MAX || image.shape[1] > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "image must be 1 or more pixels high and wide and hold fewer than 2**31 values, got %zdx%zd",
                     image.shape[0], image.shape[1]);
        goto done;
    }
    if (image.readonly) {
        PyErr_SetString(PyExc_ValueError, "image must be writable, got a read-only array");
        goto done;
    }
    if (!PyBuffer_IsContiguous(&image, 'C')) {
        PyErr_SetString(PyExc_ValueError, "image must be C-contiguous, got a strided array (numpy.ascontiguousarray copies it)");
        goto done;
    }
    count = steps_view(steps_obj, &steps, "steps");
    if (count < 0)
        goto done;
    if (count > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "steps must hold fewer than 2**31 steps, got %zd", count);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = ss_pixel_steps((uint8_t *)image.buf, (int)image.shape[0], (int)image.shape[1], (int)image.shape[2],
                        (const double *)steps.buf, (int)count, &scratch, msg, sizeof(msg));
    ss_scratch_free(&scratch);
    Py_END_ALLOW_THREADS
    if (rc == -2)
        PyErr_NoMemory();
    else if (rc != 0)
        step_error(msg);
    else
        ok = 1;

done:
    PyBuffer_Release(&image);
    PyBuffer_Release(&steps);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}


PyDoc_STRVAR(mixup_doc,
"mixup(images, out, lam) -> None\n"
"\n"
"MixUp of a batch into `out`: out[i] = images[i - 1] * (1 - lam) + images[i] * lam\n"
"(sample 0 with the last), bit for bit as images/batchops.py's NumPy code for\n"
"uint8 (the float32 sum rounded half to even, clipped), float32 and float16\n"
"images, without the GIL. `images` is a C-contiguous uint8, float32 or float16\n"
"array with the batch on its first axis, `out` a writable C-contiguous array of\n"
"the same shape and dtype that does not overlap it, lam a number in [0, 1].");

static PyObject *
mixup(PyObject *self, PyObject *args)
{
    PyObject *images_obj, *out_obj;
    Py_buffer images = {0}, out = {0};
    double lam;
    char kind;
    int d, dtype;
    size_t count, per;

    (void)self;
    if (!PyArg_ParseTuple(args, "OOd:mixup", &images_obj, &out_obj, &lam))
        return NULL;
    if (!(lam >= 0.0 && lam <= 1.0)) {
        PyErr_Format(PyExc_ValueError, "lam must be in [0, 1], got %R", PyTuple_GET_ITEM(args, 2));
        return NULL;
    }
    if (get_view(images_obj, &images, "images", "a uint8, float32 or float16 array") != 0)
        return NULL;
    if (get_view(out_obj, &out, "out", "a uint8, float32 or float16 array") != 0)
        goto fail;
    kind = buffer_kind(&images);
    if (kind == 0) {
        PyErr_Format(PyExc_TypeError, "images must be uint8, float32 or float16, got format '%s'",
                     images.format == NULL ? "B" : images.format);
        goto fail;
    }
    if (buffer_kind(&out) != kind) {
        PyErr_Format(PyExc_TypeError, "out must have the images' dtype (format '%s'), got format '%s'",
                     images.format == NULL ? "B" : images.format, out.format == NULL ? "B" : out.format);
        goto fail;
    }
    if (images.ndim < 1 || out.ndim != images.ndim) {
        PyErr_Format(PyExc_ValueError, "images must have a batch axis and out the images' shape, got %d and %d dimensions",
                     images.ndim, out.ndim);
        goto fail;
    }
    for (d = 0; d < images.ndim; d++)
        if (images.shape[d] != out.shape[d]) {
            PyErr_Format(PyExc_ValueError, "out must have the images' shape, got %zd instead of %zd on axis %d", out.shape[d],
                         images.shape[d], d);
            goto fail;
        }
    if (!PyBuffer_IsContiguous(&images, 'C')) {
        PyErr_SetString(PyExc_ValueError, "images must be C-contiguous, got a strided array (numpy.ascontiguousarray copies it)");
        goto fail;
    }
    if (check_out_buffer(&out, &images, "images") != 0)
        goto fail;
    count = (size_t)images.shape[0];
    per = count ? (size_t)(images.len / images.itemsize) / count : 0;
    dtype = kind == 'B' ? SS_U8 : kind == 'f' ? SS_F32 : SS_F16;
    if (count && per) {
        Py_BEGIN_ALLOW_THREADS
        ss_mixup(images.buf, out.buf, count, per, dtype, lam);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&images);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;

fail:
    PyBuffer_Release(&images);
    PyBuffer_Release(&out);
    return NULL;
}

static PyMethodDef roi_methods[] = {
    {"decode_jpeg", (PyCFunction)(void (*)(void))decode_jpeg, METH_VARARGS | METH_KEYWORDS, decode_jpeg_doc},
    {"encode_jpeg", (PyCFunction)(void (*)(void))encode_jpeg, METH_VARARGS | METH_KEYWORDS, encode_jpeg_doc},
    {"place", place, METH_VARARGS, place_doc},
    {"run_task", (PyCFunction)(void (*)(void))run_task, METH_VARARGS | METH_KEYWORDS, run_task_doc},
    {"pixel_steps", pixel_steps, METH_VARARGS, pixel_steps_doc},
    {"mixup", mixup, METH_VARARGS, mixup_doc},
    {"resample", (PyCFunction)(void (*)(void))resample, METH_VARARGS | METH_KEYWORDS, resample_doc},
    {"decode_region", (PyCFunction)(void (*)(void))decode_region,
     METH_VARARGS | METH_KEYWORDS, decode_region_doc},
    {"read_header", (PyCFunction)(void (*)(void))read_header,
     METH_VARARGS | METH_KEYWORDS, read_header_doc},
    {NULL, NULL, 0, NULL}
};

static int
roi_exec(PyObject *m)
{
    if (PyModule_AddIntConstant(m, "RESAMPLE_AVX2", ss_resample_avx2()) < 0)
        return -1;
    if (PyModule_AddIntConstant(m, "PIXEL_TASKS", 1) < 0)  /* run_task runs pixel steps (steps=) */
        return -1;
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
