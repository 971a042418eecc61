/* A chunk of a batch of images in one call; see task.h for the contract. */
#define _POSIX_C_SOURCE 200112L  /* clock_gettime, pthread keys */
#include "task.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pthread.h>

#include "pixel.h"
#include "resample.h"
#include "roi.h"

#define MARGIN 2  /* columns decoded past the band, so chroma upsampling matches a whole decode */

/* Each thread keeps its scratch memory (the canvas a JPEG is decoded into, the
   resampler's, a row for float outputs, the uint8 image pixel steps run on and
   theirs) from one task to the next: no allocation, page faults or unmapping
   per task. Freed when the thread ends. */
typedef struct {
    ss_scratch canvas, work, result, pixels, pixel_work;
} thread_scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void
free_thread_scratch(void *p)
{
    thread_scratch *s = (thread_scratch *)p;
    ss_scratch_free(&s->canvas);
    ss_scratch_free(&s->work);
    ss_scratch_free(&s->result);
    ss_scratch_free(&s->pixels);
    ss_scratch_free(&s->pixel_work);
    free(s);
}

static void
make_scratch_key(void)
{
    scratch_key_ok = pthread_key_create(&scratch_key, free_thread_scratch) == 0;
}

/* This thread's scratch (NULL when out of memory). */
static thread_scratch *
my_scratch(void)
{
    thread_scratch *s;
    pthread_once(&scratch_once, make_scratch_key);
    if (!scratch_key_ok)
        return NULL;
    s = (thread_scratch *)pthread_getspecific(scratch_key);
    if (s == NULL) {
        s = (thread_scratch *)calloc(1, sizeof(*s));
        if (s == NULL || pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    return s;
}

/* Grows `scratch` to `size` bytes at least; 0, or -1 when out of memory. */
static int
reserve(ss_scratch *scratch, size_t size)
{
    void *block;
    if (scratch->size >= size)
        return 0;
    block = malloc(size);
    if (block == NULL)
        return -1;
    free(scratch->block);
    scratch->block = block;
    scratch->size = size;
    return 0;
}

static double
now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int
stop_at(ss_task *task, int i, const char *why)
{
    snprintf(task->msg, sizeof(task->msg), "%s", why);
    return i;
}

/* The pixels sample i resamples from: a canvas of the whole scaled image
   with the region decoded in place, or the stored raw pixels. Returns 0,
   or -1 with task->msg set. */
static int
source(ss_task *task, int i, ss_scratch *canvas, const uint8_t **pixels, int *height, int *width)
{
    const int32_t *shape = task->shapes + 3 * (size_t)i;
    const unsigned char *data = (const unsigned char *)(uintptr_t)task->addrs[i];
    unsigned long size = (unsigned long)task->sizes[i];
    int factor = task->factors[i], channels = task->channels;
    if (factor != 1 && factor != 2 && factor != 4 && factor != 8) {
        snprintf(task->msg, sizeof(task->msg), "a DCT factor of %d", factor);
        return -1;
    }
    const int64_t *region = task->regions + 4 * (size_t)i;
    size_t dec_h, dec_w, need;
    roi_job job;

    if (task->codecs[i] == SS_RAW) {
        if (shape[2] != channels || (uint64_t)shape[0] * (uint64_t)shape[1] * (uint64_t)shape[2] != task->sizes[i]) {
            snprintf(task->msg, sizeof(task->msg), "raw pixels of another channel count or size");
            return -1;
        }
        *pixels = data;
        *height = shape[0];
        *width = shape[1];
        return 0;
    }
    if (task->marks[i] == SS_WHOLE) {
        snprintf(task->msg, sizeof(task->msg), "decoded whole before");
        return -1;
    }
    if (task->marks[i] == SS_UNCHECKED) {
        roi_header hdr;
        memset(&hdr, 0, sizeof(hdr));
        if (roi_read_header(data, size, 1, &hdr) != 0) {
            snprintf(task->msg, sizeof(task->msg), "JPEG header error: %s", hdr.msg);
            return -1;
        }
        if ((long)hdr.height != shape[0] || (long)hdr.width != shape[1]) {
            snprintf(task->msg, sizeof(task->msg), "the JPEG's size disagrees with the stored shape");
            return -1;
        }
        if (hdr.colorspace != JCS_GRAYSCALE && hdr.colorspace != JCS_RGB && hdr.colorspace != JCS_YCbCr) {
            snprintf(task->msg, sizeof(task->msg), "a CMYK/YCCK JPEG is decoded whole");
            return -1;
        }
    }
    dec_h = ((size_t)shape[0] + (size_t)factor - 1) / (size_t)factor;
    dec_w = ((size_t)shape[1] + (size_t)factor - 1) / (size_t)factor;
    if (region[0] < 0 || region[1] < 0 || region[2] < 1 || region[3] < 1 || (size_t)(region[0] + region[2]) > dec_h ||
        (size_t)(region[1] + region[3]) > dec_w) {
        snprintf(task->msg, sizeof(task->msg), "the region to decode is not inside the image");  /* (the caller's check) */
        return -1;
    }
    need = dec_h * dec_w * (size_t)channels;
    if (reserve(canvas, need) != 0) {
        snprintf(task->msg, sizeof(task->msg), "out of memory");
        return -1;
    }
    memset(&job, 0, sizeof(job));
    job.data = data;
    job.size = size;
    job.top = (long)region[0];
    job.left = (long)region[1];
    job.height = (long)region[2];
    job.width = (long)region[3];
    job.fast = task->fast;
    job.gray = channels == 1;
    job.scale = factor;
    job.margin = MARGIN;
    job.whole = 1;
    job.check_rest = task->marks[i] == SS_UNCHECKED;
    job.out = (unsigned char *)canvas->block;
    job.out_len = (ptrdiff_t)need;
    if (roi_decode(&job) != 0) {
        snprintf(task->msg, sizeof(task->msg), "%s", job.msg);
        return -1;
    }
    if ((size_t)(job.row0 + job.rows) > dec_h || (size_t)(job.col0 + job.cols) > dec_w) {
        snprintf(task->msg, sizeof(task->msg), "the region decoder returned rows past the image");
        return -1;
    }
    task->marks[i] = SS_REGION;
    *pixels = (const uint8_t *)canvas->block;
    *height = (int)dec_h;
    *width = (int)dec_w;
    return 0;
}

/* uint8 HWC `src` as CHW into `dst` */
static void
to_chw(const uint8_t *src, size_t plane, int channels, uint8_t *dst)
{
    size_t i;
    int c;
    if (channels == 1) {
        memcpy(dst, src, plane);
        return;
    }
    for (c = 0; c < channels; c++)
        for (i = 0; i < plane; i++)
            dst[(size_t)c * plane + i] = src[i * (size_t)channels + (size_t)c];
}

/* uint8 HWC `src` (plane pixels) into the uint8 row `dst`, HWC or CHW, each value v of channel c
   as table[c][v] */
static void
table_u8(const uint8_t *src, size_t plane, int channels, int chw, const uint8_t table[3][256], uint8_t *dst)
{
    size_t i;
    if (channels == 1) {
        for (i = 0; i < plane; i++)
            dst[i] = table[0][src[i]];
    } else if (chw) {
        uint8_t *d0 = dst, *d1 = dst + plane, *d2 = dst + 2 * plane;
        for (i = 0; i < plane; i++, src += 3) {
            d0[i] = table[0][src[0]];
            d1[i] = table[1][src[1]];
            d2[i] = table[2][src[2]];
        }
    } else {
        for (i = 0; i < plane; i++, src += 3, dst += 3) {
            dst[0] = table[0][src[0]];
            dst[1] = table[1][src[1]];
            dst[2] = table[2][src[2]];
        }
    }
}

/* uint8 HWC `src` (plane pixels) into a float32 or float16 (bits) CHW row through `t` (C x 256 values) */
#define CHW_WRITE(T)                                                                        \
    static void chw_write_##T(const uint8_t *src, size_t plane, int channels, const T *t, T *o) \
    {                                                                                       \
        size_t i;                                                                           \
        if (channels == 1) {                                                                \
            for (i = 0; i < plane; i++)                                                     \
                o[i] = t[src[i]];                                                           \
            return;                                                                         \
        }                                                                                   \
        for (i = 0; i < plane; i++, src += 3) {                                             \
            o[i] = t[src[0]];                                                               \
            o[plane + i] = t[256 + src[1]];                                                 \
            o[2 * plane + i] = t[512 + src[2]];                                             \
        }                                                                                   \
    }
CHW_WRITE(float)
CHW_WRITE(uint16_t)

/* Sample i's window resampled into this thread's uint8 HWC image, its pixel steps, then its row (the
   steps' trailing table steps applied as it is written: uint8 through their tables, float through the
   normalized values of their values). Returns 0, or -1 with task->msg set (a step that cannot apply,
   or out of memory). */
static int
with_steps(ss_task *task, int i, thread_scratch *scratch, const uint8_t *pixels, int height, int width, const float *e,
           uint8_t *row, size_t res_bytes)
{
    size_t plane = (size_t)task->out_h * (size_t)task->out_w;
    uint8_t *image, table[3][256];
    float lut32[3 * 256];
    uint16_t lut16[3 * 256];
    const void *lut = task->lut;
    int rc, c, v, channels = task->channels;
    if (reserve(&scratch->pixels, res_bytes) != 0)
        return stop_at(task, 0, "out of memory"), -1;
    image = (uint8_t *)scratch->pixels.block;
    if (ss_resample(pixels, height, width, channels, (size_t)width * (size_t)channels, e, task->out_h, task->out_w,
                    task->box_filter, task->flips[i], 0, image, &scratch->work) != 0)
        return stop_at(task, 0, "out of memory"), -1;
    rc = ss_pixel_steps_table(image, task->out_h, task->out_w, channels,
                              task->steps + (size_t)i * (size_t)task->n_steps * SS_PIXEL_WORDS, task->n_steps,
                              &scratch->pixel_work, task->msg, sizeof(task->msg), table);
    if (rc < 0)
        return -1;
    if (task->dtype == SS_U8) {
        if (rc == 1)
            table_u8(image, plane, channels, task->chw, (const uint8_t(*)[256])table, row);
        else if (!task->chw)
            memcpy(row, image, res_bytes);
        else
            to_chw(image, plane, channels, row);
        return 0;
    }
    if (rc == 1) {  /* the normalized value of each value's value through the tables */
        if (task->dtype == SS_F32)
            for (c = 0; c < channels; c++)
                for (v = 0; v < 256; v++)
                    lut32[c * 256 + v] = ((const float *)task->lut)[c * 256 + table[c][v]];
        else
            for (c = 0; c < channels; c++)
                for (v = 0; v < 256; v++)
                    lut16[c * 256 + v] = ((const uint16_t *)task->lut)[c * 256 + table[c][v]];
        lut = task->dtype == SS_F32 ? (const void *)lut32 : (const void *)lut16;
    }
    if (!task->chw)
        ss_write(image, res_bytes, channels, 0, plane, task->dtype, lut, row);
    else if (task->dtype == SS_F32)
        chw_write_float(image, plane, channels, (const float *)lut, (float *)row);
    else
        chw_write_uint16_t(image, plane, channels, (const uint16_t *)lut, (uint16_t *)row);
    return 0;
}

int
ss_run_task(ss_task *task, int start, int stop)
{
    thread_scratch *scratch = my_scratch();
    size_t res_bytes = (size_t)task->out_h * (size_t)task->out_w * (size_t)task->channels;
    int i;

    task->msg[0] = '\0';
    if (scratch == NULL || reserve(&scratch->result, res_bytes) != 0)
        return stop_at(task, start, "out of memory");
    for (i = start; i < stop; i++) {
        const uint8_t *pixels = NULL;
        int height = 0, width = 0, failed;
        const float *e = task->edges + 4 * (size_t)i;
        double t0 = now(), t1;
        failed = source(task, i, &scratch->canvas, &pixels, &height, &width) != 0;
        t1 = now();
        task->decode_s += t1 - t0;
        if (failed)
            break;
        if (!(e[0] >= 0 && e[2] >= 0 && e[1] <= height && e[3] <= width && e[1] > e[0] && e[3] > e[2])) {
            stop_at(task, i, "the window is not inside the image");  /* the caller checked it: a safety net */
            break;
        }
        if (task->n_steps > 0) {
            if (with_steps(task, i, scratch, pixels, height, width, e, task->out + (size_t)task->rows[i] * task->row_bytes,
                           res_bytes) != 0)
                break;
        } else {
            uint8_t *row = task->out + (size_t)task->rows[i] * task->row_bytes;
            uint8_t *res = task->dtype == SS_U8 ? row : (uint8_t *)scratch->result.block;  /* uint8: straight into the row */
            if (ss_resample(pixels, height, width, task->channels, (size_t)width * (size_t)task->channels, e,
                            task->out_h, task->out_w, task->box_filter, task->flips[i], task->chw, res, &scratch->work) != 0) {
                stop_at(task, i, "out of memory");
                break;
            }
            if (task->dtype != SS_U8)
                ss_write(res, res_bytes, task->channels, task->chw, (size_t)task->out_h * (size_t)task->out_w,
                         task->dtype, task->lut, row);
        }
        task->resample_s += now() - t1;
    }
    return i;
}
