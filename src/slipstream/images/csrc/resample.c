/* Pillow's antialiased resampling in C; see resample.h for the contract.
 *
 * Compiled with -ffp-contract=off: a fused multiply-add would round once
 * where Pillow, NumPy and numba round twice, and move a coefficient by one.
 */
#include "resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS 22
#define HALF (1 << (PRECISION_BITS - 1))
#define ONE ((double)(1 << PRECISION_BITS))

static inline uint8_t
clip8(int32_t in)
{
    if (in >= (1 << PRECISION_BITS << 8))
        return 255;
    if (in <= 0)
        return 0;
    return (uint8_t)(in >> PRECISION_BITS);
}

void
ss_scratch_free(ss_scratch *scratch)
{
    free(scratch->block);
    scratch->block = NULL;
    scratch->size = 0;
}

static void *
scratch_get(ss_scratch *scratch, size_t size)
{
    if (scratch->size < size) {
        void *block = malloc(size);
        if (block == NULL)
            return NULL;
        free(scratch->block);
        scratch->block = block;
        scratch->size = size;
    }
    return scratch->block;
}

static size_t
round16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* The filter's reach over one axis: ksize taps at most per output. */
static int
kernel_size(float in0, float in1, int out_size, int box)
{
    float span = in1 - in0;  /* in float, as Pillow takes the difference */
    double scale = (double)span / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = (box ? 0.5 : 1.0) * filterscale;
    return (int)ceil(support) * 2 + 1;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc: per output, its first
   tap and tap count (bounds[2 * xx], bounds[2 * xx + 1]) and ksize int32
   weights (kk[xx * ksize ...]); `w` holds ksize doubles of scratch. */
static void
coeffs(int in_size, float in0, float in1, int out_size, int box, int ksize, int *bounds, int32_t *kk, double *w)
{
    float span = in1 - in0;
    double scale = (double)span / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = (box ? 0.5 : 1.0) * filterscale;
    double ss = 1.0 / filterscale;
    double start = (double)in0;
    int xx, x;

    for (xx = 0; xx < out_size; xx++) {
        double center = start + (xx + 0.5) * scale;
        double ww = 0.0;
        int xmin = (int)(center - support + 0.5);
        int xmax = (int)(center + support + 0.5);
        int32_t *k = kk + (size_t)xx * (size_t)ksize;
        if (xmin < 0)
            xmin = 0;
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        if (xmax < 0)
            xmax = 0;
        if (xmax > ksize)
            xmax = ksize;  /* cannot happen (Pillow's bound); keeps the writes inside kk */
        for (x = 0; x < xmax; x++) {
            double arg = ((x + xmin) - center + 0.5) * ss;
            double wt;
            if (box) {
                wt = (arg > -0.5 && arg <= 0.5) ? 1.0 : 0.0;
            } else {
                if (arg < 0.0)
                    arg = -arg;
                wt = arg < 1.0 ? 1.0 - arg : 0.0;
            }
            w[x] = wt;
            ww += wt;
        }
        for (x = 0; x < xmax; x++) {
            double v = w[x];
            if (ww != 0.0)
                v = v / ww;
            k[x] = v < 0 ? (int32_t)(-0.5 + v * ONE) : (int32_t)(0.5 + v * ONE);
        }
        for (; x < ksize; x++)
            k[x] = 0;
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
}

/* Horizontal pass: `rows` rows of `in` (interleaved pixels; tap t of output
   xx reads column bounds[2 * xx] + t - shift) into `out`, mirrored with flip. */
static void
hpass(const uint8_t *in, size_t in_stride, int rows, int channels, int shift, const int *bounds,
      const int32_t *kk, int ksize, int out_w, int flip, uint8_t *out, size_t out_stride)
{
    int r, xx, x;
    for (r = 0; r < rows; r++) {
        const uint8_t *line = in + (size_t)r * in_stride;
        uint8_t *o = out + (size_t)r * out_stride;
        for (xx = 0; xx < out_w; xx++) {
            const int32_t *k = kk + (size_t)xx * (size_t)ksize;
            int count = bounds[2 * xx + 1];
            int dx = flip ? out_w - 1 - xx : xx;
            if (channels == 3) {
                const uint8_t *p = line + (size_t)(bounds[2 * xx] - shift) * 3;
                int32_t s0 = HALF, s1 = HALF, s2 = HALF;
                for (x = 0; x < count; x++) {
                    s0 += p[3 * x] * k[x];
                    s1 += p[3 * x + 1] * k[x];
                    s2 += p[3 * x + 2] * k[x];
                }
                o[3 * dx] = clip8(s0);
                o[3 * dx + 1] = clip8(s1);
                o[3 * dx + 2] = clip8(s2);
            } else {
                const uint8_t *p = line + (size_t)(bounds[2 * xx] - shift);
                int32_t s0 = HALF;
                for (x = 0; x < count; x++)
                    s0 += p[x] * k[x];
                o[dx] = clip8(s0);
            }
        }
    }
}

/* Vertical pass over `n` bytes of each row (`in` starts at the first column
   read; tap t of output row yy reads row bounds[2 * yy] + t - shift). */
static void
vpass(const uint8_t *in, size_t in_stride, size_t n, int shift, const int *bounds, const int32_t *kk,
      int ksize, int out_h, int32_t *acc, uint8_t *out, size_t out_stride)
{
    int yy, y;
    size_t i;
    for (yy = 0; yy < out_h; yy++) {
        const int32_t *k = kk + (size_t)yy * (size_t)ksize;
        int ymin = bounds[2 * yy] - shift, count = bounds[2 * yy + 1];
        uint8_t *o = out + (size_t)yy * out_stride;
        for (i = 0; i < n; i++)
            acc[i] = HALF;
        for (y = 0; y < count; y++) {
            const uint8_t *row = in + (size_t)(ymin + y) * in_stride;
            int32_t weight = k[y];
            for (i = 0; i < n; i++)
                acc[i] += row[i] * weight;
        }
        for (i = 0; i < n; i++)
            o[i] = clip8(acc[i]);
    }
}

int
ss_resample(const uint8_t *src, int height, int width, int channels, size_t stride,
            const float edges[4], int out_h, int out_w, int box_filter, int flip,
            uint8_t *res, ss_scratch *scratch)
{
    int kv_size = kernel_size(edges[0], edges[1], out_h, box_filter);
    int kh_size = kernel_size(edges[2], edges[3], out_w, box_filter);
    int wide = kv_size > kh_size ? kv_size : kh_size;
    int horizontal_first = !(height - out_h > 0 && height - out_h > (width - out_w) * 2);
    size_t row_bytes = (size_t)out_w * (size_t)channels;
    /* the intermediate image is at most max(height x out_w, out_h x width) pixels */
    size_t tmp_bytes = (size_t)channels * ((size_t)height * (size_t)out_w > (size_t)out_h * (size_t)width
                                               ? (size_t)height * (size_t)out_w
                                               : (size_t)out_h * (size_t)width);
    size_t acc_n = (size_t)channels * (size_t)(width > out_w ? width : out_w);
    size_t o_yb = 0;
    size_t o_xb = o_yb + round16(sizeof(int) * 2 * (size_t)out_h);
    size_t o_kv = o_xb + round16(sizeof(int) * 2 * (size_t)out_w);
    size_t o_kh = o_kv + round16(sizeof(int32_t) * (size_t)out_h * (size_t)kv_size);
    size_t o_w = o_kh + round16(sizeof(int32_t) * (size_t)out_w * (size_t)kh_size);
    size_t o_acc = o_w + round16(sizeof(double) * (size_t)wide);
    size_t o_tmp = o_acc + round16(sizeof(int32_t) * acc_n);
    char *block = scratch_get(scratch, o_tmp + round16(tmp_bytes));
    int *yb, *xb;
    int32_t *kv, *kh, *acc;
    uint8_t *tmp;

    if (block == NULL)
        return -1;
    yb = (int *)(block + o_yb);
    xb = (int *)(block + o_xb);
    kv = (int32_t *)(block + o_kv);
    kh = (int32_t *)(block + o_kh);
    acc = (int32_t *)(block + o_acc);
    tmp = (uint8_t *)(block + o_tmp);
    coeffs(height, edges[0], edges[1], out_h, box_filter, kv_size, yb, kv, (double *)(block + o_w));
    coeffs(width, edges[2], edges[3], out_w, box_filter, kh_size, xb, kh, (double *)(block + o_w));

    if (horizontal_first) {
        int first = yb[0], last = yb[2 * (out_h - 1)] + yb[2 * (out_h - 1) + 1], yy;
        for (yy = 0; yy < out_h; yy++) {  /* (bounds grow with yy; be safe) */
            if (yb[2 * yy] < first)
                first = yb[2 * yy];
            if (yb[2 * yy] + yb[2 * yy + 1] > last)
                last = yb[2 * yy] + yb[2 * yy + 1];
        }
        hpass(src + (size_t)first * stride, stride, last - first, channels, 0, xb, kh, kh_size, out_w, flip, tmp, row_bytes);
        vpass(tmp, row_bytes, row_bytes, first, yb, kv, kv_size, out_h, acc, res, row_bytes);
    } else {
        int first = xb[0], last = 0, xx;
        size_t cols;
        for (xx = 0; xx < out_w; xx++) {
            if (xb[2 * xx] < first)
                first = xb[2 * xx];
            if (xb[2 * xx] + xb[2 * xx + 1] > last)
                last = xb[2 * xx] + xb[2 * xx + 1];
        }
        cols = (size_t)(last - first) * (size_t)channels;
        vpass(src + (size_t)first * (size_t)channels, stride, cols, 0, yb, kv, kv_size, out_h, acc, tmp, cols);
        hpass(tmp, cols, out_h, channels, first, xb, kh, kh_size, out_w, flip, res, row_bytes);
    }
    return 0;
}

void
ss_write(const uint8_t *res, int out_h, int out_w, int channels, int chw, int dtype, const void *lut, void *out)
{
    size_t plane = (size_t)out_h * (size_t)out_w, i;
    int c;
    if (dtype == SS_U8) {
        uint8_t *o = (uint8_t *)out;
        if (!chw || channels == 1) {
            memcpy(o, res, plane * (size_t)channels);
            return;
        }
        for (i = 0; i < plane; i++)
            for (c = 0; c < channels; c++)
                o[(size_t)c * plane + i] = res[i * (size_t)channels + (size_t)c];
    } else if (dtype == SS_F32) {
        const float *t = (const float *)lut;
        float *o = (float *)out;
        for (i = 0; i < plane; i++)
            for (c = 0; c < channels; c++) {
                size_t to = chw ? (size_t)c * plane + i : i * (size_t)channels + (size_t)c;
                o[to] = t[c * 256 + res[i * (size_t)channels + (size_t)c]];
            }
    } else {
        const uint16_t *t = (const uint16_t *)lut;
        uint16_t *o = (uint16_t *)out;
        for (i = 0; i < plane; i++)
            for (c = 0; c < channels; c++) {
                size_t to = chw ? (size_t)c * plane + i : i * (size_t)channels + (size_t)c;
                o[to] = t[c * 256 + res[i * (size_t)channels + (size_t)c]];
            }
    }
}
