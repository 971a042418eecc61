/* The pixel ops' step programs in C; see pixel.h for the contract and
 * images/kernels/pixel_steps.py (the reference) for each operation.
 *
 * Every float32 operation of the reference is written here as one C float
 * operation in the same order (FLT_EVAL_METHOD 0 on x86-64 and arm64;
 * -ffp-contract=off: no fused multiply-add), torch's fused add as
 * (float)((double)a + (double)alpha * (double)b), truncation to uint8 after
 * clipping to [0, 255] (NaN to 0, as NumPy's cast gives on these machines),
 * round half to even by adding and subtracting 2**23 (exact below 2**23,
 * the default rounding mode). Colour ops that map each value on its own are
 * a 256-entry table per channel computed with the reference's arithmetic;
 * the others run row by row over float32 temporaries that the compiler
 * vectorizes (twice on x86-64: for AVX2 where the CPU has it, and the
 * baseline; IEEE operations give the same bits in both).
 */
#include "pixel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
/* Float compares may then be selects: the loops with them vectorize. It changes no value (only whether an
   operation may raise a floating-point trap, which no code here enables); clang assumes it by default. */
#pragma GCC optimize("no-trapping-math")
#endif

#include "dispatch.h"

enum {
    NONE, BRIGHTNESS, CONTRAST, SATURATION, HUE, SHARPNESS, POSTERIZE, SOLARIZE, AUTOCONTRAST, EQUALIZE, INVERT,
    GRAYSCALE, BLUR, AFFINE, ROT90, ERASE, CODES
};
static const char *const NAMES[CODES] = {"NONE", "BRIGHTNESS", "CONTRAST", "SATURATION", "HUE", "SHARPNESS",
                                         "POSTERIZE", "SOLARIZE", "AUTOCONTRAST", "EQUALIZE", "INVERT", "GRAYSCALE",
                                         "BLUR", "AFFINE", "ROT90", "ERASE"};

#define TWO23 8388608.0f

/* the reference's float32 constants: Python doubles rounded to float32 */
#define GRAY0 ((float)0.2989)
#define GRAY1 ((float)0.587)
#define GRAY2 ((float)0.114)

INLINE float
fused(float a, float alpha, float b)
{
    return (float)((double)a + (double)alpha * (double)b);
}

/* clip to [0, 255], truncate (NaN: 0) */
INLINE uint8_t
trunc8(float x)
{
    float c = x > 0.0f ? x : 0.0f;
    c = c < 255.0f ? c : 255.0f;
    return (uint8_t)(int32_t)c;
}

/* clip(rint(x), 0, 255) (NaN: 0) */
INLINE uint8_t
round8(float x)
{
    float c = x > 0.0f ? x : 0.0f;
    c = c < 255.0f ? c : 255.0f;
    return (uint8_t)(int32_t)((c + TWO23) - TWO23);
}

/* rint (half to even) of any float32 */
INLINE float
rint_any(float x)
{
    float a = fabsf(x), r = copysignf((a + TWO23) - TWO23, x);  /* computed either way: a select, no branch */
    return a < TWO23 ? r : x;
}

INLINE float
floor_any(float x)
{
    float r = rint_any(x), below = r - 1.0f;
    return r > x ? below : r;
}

INLINE float
gray_of(float r, float g, float b)
{
    return fused(fused(r * GRAY0, GRAY1, g), GRAY2, b);
}

/* ------------------------------------------------------------------ scratch */

static void *
need(ss_scratch *scratch, size_t bytes)
{
    void *block;
    if (scratch->size >= bytes && scratch->block != NULL)
        return scratch->block;
    block = malloc(bytes < 64 ? 64 : bytes);
    if (block == NULL)
        return NULL;
    free(scratch->block);
    scratch->block = block;
    scratch->size = bytes < 64 ? 64 : bytes;
    return block;
}

static size_t
up64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* ------------------------------------------------------------------ tables */

/* 8 bytes at p through the tables t0..t7 (byte k through tk), read and written as one word each */
#define LOOKUP8(p, t0, t1, t2, t3, t4, t5, t6, t7)                                                                 \
    do {                                                                                                           \
        uint64_t w_, o_;                                                                                           \
        memcpy(&w_, (p), 8);                                                                                       \
        o_ = (uint64_t)(t0)[w_ & 255] | (uint64_t)(t1)[(w_ >> 8) & 255] << 8 | (uint64_t)(t2)[(w_ >> 16) & 255] << 16 | \
             (uint64_t)(t3)[(w_ >> 24) & 255] << 24 | (uint64_t)(t4)[(w_ >> 32) & 255] << 32 |                      \
             (uint64_t)(t5)[(w_ >> 40) & 255] << 40 | (uint64_t)(t6)[(w_ >> 48) & 255] << 48 |                      \
             (uint64_t)(t7)[w_ >> 56] << 56;                                                                       \
        memcpy((p), &o_, 8);                                                                                       \
    } while (0)

/* p[i] = lut[c][p[i]] (c the channel of element i; `shared`: one table for every channel); a word of
   8 values at a time (fewer loads and stores than one value at a time; little-endian byte order) */
static void
apply_lut(uint8_t *p, size_t pixels, int channels, const uint8_t lut[3][256], int shared)
{
    size_t i = 0, n = pixels * (size_t)channels;
    const uint8_t *a = lut[0], *b = lut[1], *c = lut[2];
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (channels == 1 || shared) {
        for (; i + 8 <= n; i += 8)
            LOOKUP8(p + i, a, a, a, a, a, a, a, a);
    } else {
        for (; i + 24 <= n; i += 24) {  /* 8 pixels: value k of the block is channel k % 3 */
            LOOKUP8(p + i, a, b, c, a, b, c, a, b);
            LOOKUP8(p + i + 8, c, a, b, c, a, b, c, a);
            LOOKUP8(p + i + 16, b, c, a, b, c, a, b, c);
        }
    }
#endif
    if (channels == 1 || shared) {
        for (; i < n; i++)
            p[i] = a[p[i]];
        return;
    }
    for (; i < n; i += 3) {  /* (i a multiple of 3: the pixels left) */
        p[i] = a[p[i]];
        p[i + 1] = b[p[i + 1]];
        p[i + 2] = c[p[i + 2]];
    }
}

/* ------------------------------------------------------------------ grayscale-based colour ops */

/* the sum of the floored luma of each pixel (3 channels) */
INLINE int64_t
gray_sum_body(const uint8_t *p, size_t pixels)
{
    int64_t total = 0;
    size_t i = 0;
    while (i < pixels) {
        size_t stop = pixels - i > 65536 ? i + 65536 : pixels;  /* int32 partial sums: 65536 * 255 fits */
        int32_t part = 0;
        for (; i < stop; i++) {
            float g = gray_of((float)p[3 * i], (float)p[3 * i + 1], (float)p[3 * i + 2]);
            part += (int32_t)g;  /* g >= 0: truncation is the floor */
        }
        total += part;
    }
    return total;
}

static int64_t
gray_sum_base(const uint8_t *p, size_t pixels)
{
    return gray_sum_body(p, pixels);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__APPLE__)
__attribute__((target("avx2"))) static int64_t
gray_sum_avx2(const uint8_t *p, size_t pixels)
{
    return gray_sum_body(p, pixels);
}
#endif

static int64_t
gray_sum(const uint8_t *p, size_t pixels)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__APPLE__)
    if (ss_resample_avx2())
        return gray_sum_avx2(p, pixels);
#endif
    return gray_sum_base(p, pixels);
}

INLINE void
saturation_body(uint8_t *p, size_t pixels, float factor, float alpha)
{
    size_t i;
    for (i = 0; i < pixels; i++) {
        float r = (float)p[3 * i], g = (float)p[3 * i + 1], b = (float)p[3 * i + 2];
        float other = (float)(int32_t)gray_of(r, g, b);
        p[3 * i] = trunc8(fused(r * factor, alpha, other));
        p[3 * i + 1] = trunc8(fused(g * factor, alpha, other));
        p[3 * i + 2] = trunc8(fused(b * factor, alpha, other));
    }
}
DISPATCHED(saturation, (uint8_t * p, size_t pixels, float factor, float alpha), (p, pixels, factor, alpha))

INLINE void
grayscale_body(uint8_t *p, size_t pixels)
{
    size_t i;
    for (i = 0; i < pixels; i++) {
        uint8_t t = trunc8(gray_of((float)p[3 * i], (float)p[3 * i + 1], (float)p[3 * i + 2]));
        p[3 * i] = t;
        p[3 * i + 1] = t;
        p[3 * i + 2] = t;
    }
}
DISPATCHED(grayscale, (uint8_t * p, size_t pixels), (p, pixels))

#define CHUNK 512  /* pixels per pass over float planes */

/* (3 channels) the pixels `at`.. as float planes, n of them (at most CHUNK) */
static int
planes(const uint8_t *p, size_t pixels, size_t at, float *r, float *g, float *b)
{
    const uint8_t *q = p + 3 * at;
    int i, n = pixels - at < CHUNK ? (int)(pixels - at) : CHUNK;
    for (i = 0; i < n; i++) {
        r[i] = (float)q[3 * i];
        g[i] = (float)q[3 * i + 1];
        b[i] = (float)q[3 * i + 2];
    }
    return n;
}

/* the planes' values (whole numbers in [0, 255] or, truncated, [0, 256)) back as uint8 */
static void
unplanes(uint8_t *p, size_t at, int n, const float *r, const float *g, const float *b)
{
    uint8_t *q = p + 3 * at;
    int i;
    for (i = 0; i < n; i++) {
        q[3 * i] = (uint8_t)(int32_t)r[i];
        q[3 * i + 1] = (uint8_t)(int32_t)g[i];
        q[3 * i + 2] = (uint8_t)(int32_t)b[i];
    }
}

/* ------------------------------------------------------------------ hue */

INLINE float
clip01(float x)
{
    float c = x < 0.0f ? 0.0f : x;
    return c > 1.0f ? 1.0f : c;
}

/* fmodf(y, 1.0f), exactly: |y| - floor(|y|) is exact (Sterbenz), with y's sign */
INLINE float
fmod1(float y)
{
    float a = fabsf(y);
    return copysignf(a - floor_any(a), y);
}

/* np.mod(a, 1) in float32 (npy_divmodf's remainder: fmod, moved into [0, 1), +0 for zero) */
INLINE float
mod1(float a)
{
    float m = fmod1(a), up = m + 1.0f;
    m = m < 0.0f ? up : m;
    return m == 0.0f ? 0.0f : m;
}

/* the hue shift of n pixels given as float planes (the values 0..255), written back as the float
   outputs (value * 255.999, to be truncated) */
INLINE void
hue_planes_body(float *restrict rp, float *restrict gp, float *restrict bp, int n, float shift)
{
    const float inv255 = (float)(1.0 / 255), sixth = (float)(1.0 / 6), top = (float)255.999;
    int i;
    for (i = 0; i < n; i++) {
        float r = rp[i] * inv255, g = gp[i] * inv255, b = bp[i] * inv255;
        float maxc = r > g ? r : g, minc = r < g ? r : g;
        maxc = maxc > b ? maxc : b;
        minc = minc < b ? minc : b;
        int equal = maxc == minc;
        float spread = maxc - minc;
        float s = spread / (equal ? 1.0f : maxc);
        float divisor = equal ? 1.0f : spread;
        float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
        float hr_v = bc - gc, hg_v = (2.0f + rc) - bc, hb_v = (4.0f + gc) - rc;  /* all computed: selects, no branches */
        float hr = maxc == r ? hr_v : 0.0f;
        float hg = maxc != r ? hg_v : 0.0f;  /* (maxc == g && maxc != r): two selects, no boolean arithmetic */
        float hb = maxc != r ? hb_v : 0.0f;
        hg = maxc == g ? hg : 0.0f;
        hb = maxc != g ? hb : 0.0f;
        float h = fmod1(((hr + hg) + hb) * sixth + 1.0f);
        h = mod1(h + shift);
        float h6 = h * 6.0f;
        float sector = floor_any(h6);
        float frac = h6 - sector;
        float sixths = sector - 6.0f;
        float k = sector >= 6.0f ? sixths : sector;  /* the sector 0..5 (h in [0, 1]), as a float: float selects */
        float v = maxc;
        float pv = clip01((1.0f - s) * v);
        float qv = clip01((1.0f - s * frac) * v);
        float tv = clip01((s * frac + (1.0f - s)) * v);
        /* (r, g, b) by sector: (v,t,p) (q,v,p) (p,v,t) (p,q,v) (t,p,v) (v,p,q) */
        float ro = tv, go = pv, bo = qv;  /* one select at a time (nested ones do not vectorize) */
        ro = k == 2.0f ? pv : ro;
        ro = k == 3.0f ? pv : ro;
        ro = k == 1.0f ? qv : ro;
        ro = k == 0.0f ? v : ro;
        ro = k == 5.0f ? v : ro;
        go = k == 3.0f ? qv : go;
        go = k == 1.0f ? v : go;
        go = k == 2.0f ? v : go;
        go = k == 0.0f ? tv : go;
        bo = k == 3.0f ? v : bo;
        bo = k == 4.0f ? v : bo;
        bo = k == 2.0f ? tv : bo;
        bo = k == 0.0f ? pv : bo;
        bo = k == 1.0f ? pv : bo;
        rp[i] = ro * top;
        gp[i] = go * top;
        bp[i] = bo * top;
    }
}
DISPATCHED(hue_planes, (float *rp, float *gp, float *bp, int n, float shift), (rp, gp, bp, n, shift))

static void
hue(uint8_t *p, size_t pixels, float shift)
{
    float r[CHUNK], g[CHUNK], b[CHUNK];
    size_t at;
    for (at = 0; at < pixels; at += CHUNK) {
        int n = planes(p, pixels, at, r, g, b);
        hue_planes(r, g, b, n, shift);
        unplanes(p, at, n, r, g, b);  /* (values in [0, 255.999]) */
    }
}

/* ------------------------------------------------------------------ sharpness */

INLINE void
to_float(const uint8_t *src, float *dst, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        dst[i] = (float)src[i];
}

/* row y's interior from the float rows above (a), at (b) and below (c) it */
INLINE void
sharpen_row_body(const float *a, const float *b, const float *c, uint8_t *out, size_t from, size_t to, size_t step,
                 float alpha)
{
    const float side = (float)(1.0 / 13), middle = (float)(5.0 / 13);
    size_t i;
    for (i = from; i < to; i++) {
        float s = a[i - step] * side;
        s += a[i] * side;
        s += a[i + step] * side;
        s += b[i - step] * side;
        s += b[i] * middle;
        s += b[i + step] * side;
        s += c[i - step] * side;
        s += c[i] * side;
        s += c[i + step] * side;
        s = (s + TWO23) - TWO23;  /* s >= 0 */
        out[i] = trunc8(fused(b[i], alpha, s - b[i]));
    }
}
DISPATCHED(sharpen_row, (const float *a, const float *b, const float *c, uint8_t *out, size_t from, size_t to, size_t step, float alpha),
           (a, b, c, out, from, to, step, alpha))

static int
sharpness(uint8_t *image, int height, int width, int channels, double factor, ss_scratch *scratch)
{
    size_t row = (size_t)width * (size_t)channels, step = (size_t)channels;
    float *rows[3], *t;
    char *block;
    int y;
    if (height <= 2 || width <= 2)
        return 0;
    block = (char *)need(scratch, 3 * up64(row * sizeof(float)));
    if (block == NULL)
        return -2;
    rows[0] = (float *)block;
    rows[1] = (float *)(block + up64(row * sizeof(float)));
    rows[2] = (float *)(block + 2 * up64(row * sizeof(float)));
    to_float(image, rows[0], row);
    to_float(image + row, rows[1], row);
    for (y = 1; y < height - 1; y++) {
        to_float(image + (size_t)(y + 1) * row, rows[2], row);  /* not written yet */
        sharpen_row(rows[0], rows[1], rows[2], image + (size_t)y * row, step, row - step, step, (float)(1.0 - factor));
        t = rows[0];
        rows[0] = rows[1];
        rows[1] = rows[2];
        rows[2] = t;
    }
    return 0;
}

/* ------------------------------------------------------------------ per-channel tables */

/* Steps that map each value through a 256-entry table per channel (BRIGHTNESS, CONTRAST, POSTERIZE,
   SOLARIZE, AUTOCONTRAST, EQUALIZE, INVERT) are not applied one by one: their tables are composed
   into `pending` (value v of channel c becomes t[c][v]), applied in one pass before the next step
   that needs the pixels themselves, or handed to the caller at the end (ss_pixel_steps_table). A
   step whose table depends on the image (AUTOCONTRAST's min and max, EQUALIZE's histogram) reads
   the image as it would be with the pending tables applied (the stored values' histogram mapped
   through them); CONTRAST's mean needs whole pixels, so the pending tables are applied first. */
typedef struct {
    uint8_t t[3][256];
    int on;      /* 0: nothing pending (t unset) */
    int shared;  /* every channel's table the same (t[0]) */
} pending;

/* `pending` followed by one table for every channel */
static void
pend_shared(pending *q, const uint8_t lut[256])
{
    int c, v;
    if (!q->on) {
        memcpy(q->t[0], lut, 256);
        q->on = 1;
        q->shared = 1;
    } else {
        for (v = 0; v < 256; v++)
            q->t[0][v] = lut[q->t[0][v]];
        if (!q->shared)
            for (c = 1; c < 3; c++)
                for (v = 0; v < 256; v++)
                    q->t[c][v] = lut[q->t[c][v]];
    }
    if (q->shared) {
        memcpy(q->t[1], q->t[0], 256);
        memcpy(q->t[2], q->t[0], 256);
    }
}

/* `pending` followed by a table per channel */
static void
pend_each(pending *q, const uint8_t lut[3][256], int channels)
{
    int c, v;
    if (!q->on) {
        memcpy(q->t, lut, sizeof(q->t));
        q->on = 1;
    } else {
        for (c = 0; c < 3; c++)
            for (v = 0; v < 256; v++)
                q->t[c][v] = lut[c][q->t[c][v]];
    }
    q->shared = channels == 1 || (memcmp(q->t[0], q->t[1], 256) == 0 && memcmp(q->t[0], q->t[2], 256) == 0);
}

/* the pending tables applied to the image (nothing pending afterwards) */
static void
flush(uint8_t *image, size_t pixels, int channels, pending *q)
{
    if (!q->on)
        return;
    apply_lut(image, pixels, channels, (const uint8_t(*)[256])q->t, q->shared);
    q->on = 0;
}

/* each channel's histogram of the image as it is with the pending tables applied */
static void
histograms(const uint8_t *image, size_t pixels, int channels, const pending *q, int64_t hist[3][256])
{
    uint32_t raw[3][256];
    size_t i;
    int c, v;
    memset(raw, 0, sizeof(raw));
    if (channels == 1) {
        for (i = 0; i < pixels; i++)
            raw[0][image[i]]++;
    } else {
        for (i = 0; i < 3 * pixels; i += 3) {
            raw[0][image[i]]++;
            raw[1][image[i + 1]]++;
            raw[2][image[i + 2]]++;
        }
    }
    memset(hist, 0, 3 * 256 * sizeof(int64_t));
    for (c = 0; c < channels; c++)
        for (v = 0; v < 256; v++)
            hist[c][q->on ? q->t[c][v] : v] += raw[c][v];
}

/* each channel's min and max of 3-channel pixels: 48-byte blocks (16 pixels; value j of a block is
   channel j % 3) reduced lane by lane, then the lanes and the last pixels */
INLINE void
min_max3_body(const uint8_t *image, size_t pixels, uint8_t lo[3], uint8_t hi[3])
{
    uint8_t low[48], high[48];
    size_t i, n = 3 * pixels, blocks = n / 48 * 48;
    int j;
    memset(low, 255, sizeof(low));
    memset(high, 0, sizeof(high));
    for (i = 0; i < blocks; i += 48)
        for (j = 0; j < 48; j++) {
            uint8_t v = image[i + (size_t)j];
            low[j] = v < low[j] ? v : low[j];
            high[j] = v > high[j] ? v : high[j];
        }
    for (j = 0; j < 48; j++) {
        lo[j % 3] = low[j] < lo[j % 3] ? low[j] : lo[j % 3];
        hi[j % 3] = high[j] > hi[j % 3] ? high[j] : hi[j % 3];
    }
    for (i = blocks; i < n; i++) {
        lo[i % 3] = image[i] < lo[i % 3] ? image[i] : lo[i % 3];
        hi[i % 3] = image[i] > hi[i % 3] ? image[i] : hi[i % 3];
    }
}
DISPATCHED(min_max3, (const uint8_t *image, size_t pixels, uint8_t *lo, uint8_t *hi), (image, pixels, lo, hi))

static void
autocontrast(const uint8_t *image, size_t pixels, int channels, pending *q)
{
    uint8_t lut[3][256], lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0};
    int c, v;
    size_t i;
    if (q->on) {
        int64_t hist[3][256];
        histograms(image, pixels, channels, q, hist);
        for (c = 0; c < channels; c++) {
            for (v = 0; v < 256 && hist[c][v] == 0; v++)
                ;
            lo[c] = (uint8_t)v;
            for (v = 255; v > 0 && hist[c][v] == 0; v--)
                ;
            hi[c] = (uint8_t)v;
        }
    } else if (channels == 1) {
        for (i = 0; i < pixels; i++) {
            lo[0] = image[i] < lo[0] ? image[i] : lo[0];
            hi[0] = image[i] > hi[0] ? image[i] : hi[0];
        }
    } else {
        min_max3(image, pixels, lo, hi);
    }
    for (c = 0; c < 3; c++) {
        float flo = (float)lo[c], fhi = (float)hi[c];
        int flat = fhi == flo;
        float scale = flat ? 1.0f : (fhi - flo) * (float)(1.0 / 255);
        float base = flat ? 0.0f : flo;
        for (v = 0; v < 256; v++)
            lut[c][v] = trunc8(((float)v - base) / scale);
    }
    pend_each(q, (const uint8_t(*)[256])lut, channels);
}

static void
equalize(const uint8_t *image, size_t pixels, int channels, pending *q)
{
    uint8_t lut[3][256];
    int64_t hist[3][256];
    int c, v;
    histograms(image, pixels, channels, q, hist);
    for (c = 0; c < 3; c++) {
        int64_t cum = 0, last, step;
        for (last = 255; last > 0 && hist[c][last] == 0; last--)
            ;
        step = ((int64_t)pixels - hist[c][last]) / 255;
        if (c >= channels || step == 0) {
            for (v = 0; v < 256; v++)
                lut[c][v] = (uint8_t)v;
            continue;
        }
        lut[c][0] = 0;
        for (v = 1; v < 256; v++) {
            int64_t quotient;
            cum += hist[c][v - 1];
            quotient = (cum + step / 2) / step;
            lut[c][v] = (uint8_t)(quotient < 255 ? quotient : 255);
        }
    }
    pend_each(q, (const uint8_t(*)[256])lut, channels);
}

/* ------------------------------------------------------------------ blur */

/* e**y for y <= 0 with IEEE additions and multiplications only (the reference's _exp_negative) */
static double
exp_negative(double y)
{
    int exponent, halvings, j, k;
    double z, total;
    (void)frexp(y, &exponent);
    halvings = exponent + 4 > 0 ? exponent + 4 : 0;
    z = ldexp(y, -halvings);
    total = z * (1.0 / 9) + 1.0;
    for (k = 8; k >= 1; k--) {
        total = total * z;
        total = total * (1.0 / k);
        total = total + 1.0;
    }
    for (j = 0; j < halvings; j++)
        total = total * total;
    return total;
}

/* the reference's blur_weights(size, sigma), size >= 1, through `e` (size doubles) */
static void
blur_weights(int size, double sigma, double *e, float *w)
{
    int center = (size - 1) / 2, i;
    double total = 0.0;
    for (i = 0; i < size; i++) {
        double d = (double)i - (double)center;
        e[i] = exp_negative(-(d * d) / (2.0 * sigma * sigma));
    }
    for (i = 0; i < size; i++)
        total += e[i];
    for (i = 0; i < size; i++)
        w[i] = (float)(e[i] / total);
}

INLINE int
reflect(int index, int n)
{
    index = index < 0 ? -index : index;
    return index >= n ? 2 * (n - 1) - index : index;
}

/* acc[i] = sum over k of pad[k * step + i] * w[k], in tap order */
INLINE void
taps_body(const float *pad, size_t step, const float *w, int taps, float *acc, size_t n)
{
    size_t i;
    int k;
    for (i = 0; i < n; i++)
        acc[i] = pad[i] * w[0];
    for (k = 1; k < taps; k++) {
        const float *src = pad + (size_t)k * step;
        float wk = w[k];
        for (i = 0; i < n; i++)
            acc[i] += src[i] * wk;
    }
}
DISPATCHED(taps, (const float *pad, size_t step, const float *w, int taps, float *acc, size_t n), (pad, step, w, taps, acc, n))

/* acc[i] += src[i] * w over rows */
INLINE void
add_row_body(const float *src, float w, float *acc, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        acc[i] += src[i] * w;
}
DISPATCHED(add_row, (const float *src, float w, float *acc, size_t n), (src, w, acc, n))

INLINE void
first_row_body(const float *src, float w, float *acc, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        acc[i] = src[i] * w;
}
DISPATCHED(first_row, (const float *src, float w, float *acc, size_t n), (src, w, acc, n))

INLINE void
round_row_body(const float *acc, uint8_t *out, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        out[i] = round8(acc[i]);
}
DISPATCHED(round_row, (const float *acc, uint8_t *out, size_t n), (acc, out, n))

static int
blur(uint8_t *image, int height, int width, int channels, int kx, int ky, double sx, double sy, ss_scratch *scratch)
{
    size_t row = (size_t)width * (size_t)channels, plane = row * (size_t)height, cols, at = 0;
    size_t o_across, o_pad, o_acc, o_e, o_wx, o_wy;
    int rx = kx / 2, ry = ky / 2, y, j, c, k;
    char *block;
    float *across, *pad, *acc, *wx, *wy;
    double *e;
    if (kx <= 0 || ky <= 0) {  /* no taps one way: the reference sums nothing */
        memset(image, 0, plane);
        return 0;
    }
    cols = (size_t)width + (size_t)kx - 1;
    o_across = at, at += up64(plane * sizeof(float));
    o_pad = at, at += up64(cols * (size_t)channels * sizeof(float));
    o_acc = at, at += up64(row * sizeof(float));
    o_e = at, at += up64((size_t)(kx > ky ? kx : ky) * sizeof(double));
    o_wx = at, at += up64((size_t)kx * sizeof(float));
    o_wy = at, at += up64((size_t)ky * sizeof(float));
    block = (char *)need(scratch, at);
    if (block == NULL)
        return -2;
    across = (float *)(block + o_across);
    pad = (float *)(block + o_pad);
    acc = (float *)(block + o_acc);
    e = (double *)(block + o_e);
    wx = (float *)(block + o_wx);
    wy = (float *)(block + o_wy);
    blur_weights(kx, sx, e, wx);
    blur_weights(ky, sy, e, wy);
    for (y = 0; y < height; y++) {
        const uint8_t *src = image + (size_t)y * row;
        to_float(src, pad + (size_t)rx * (size_t)channels, row);  /* the row itself, then the reflected margins */
        for (j = 0; j < (int)cols; j++) {
            const uint8_t *px;
            if (j == rx)
                j += width;
            if (j >= (int)cols)
                break;
            px = src + (size_t)reflect(j - rx, width) * (size_t)channels;
            for (c = 0; c < channels; c++)
                pad[(size_t)j * (size_t)channels + (size_t)c] = (float)px[c];
        }
        taps(pad, (size_t)channels, wx, kx, across + (size_t)y * row, row);
    }
    for (y = 0; y < height; y++) {
        first_row(across + (size_t)reflect(y - ry, height) * row, wy[0], acc, row);
        for (k = 1; k < ky; k++)
            add_row(across + (size_t)reflect(y + k - ry, height) * row, wy[k], acc, row);
        round_row(acc, image + (size_t)y * row, row);
    }
    return 0;
}

/* ------------------------------------------------------------------ affine */

typedef struct {
    float a0, a1, a2, b0, b1, b2, fw, fh;
} grid;

/* source coordinates (ix, iy) of output row y (the reference's source_coordinates) */
INLINE void
grid_row_body(const grid *g, const float *xs, float ys, int width, float *ix, float *iy)
{
    int x;
    for (x = 0; x < width; x++) {
        float gx = (xs[x] * g->a0 + ys * g->a1) + g->a2;
        float gy = (xs[x] * g->b0 + ys * g->b1) + g->b2;
        ix[x] = ((gx + 1.0f) * g->fw - 1.0f) / 2.0f;
        iy[x] = ((gy + 1.0f) * g->fh - 1.0f) / 2.0f;
    }
}

/* nearest: the source index of each output pixel of the row (pixel offset), or -1 outside */
INLINE void
nearest_row_body(const grid *g, const float *xs, float ys, int width, int height, float *ix, float *iy, int32_t *index)
{
    int x;
    float fw = (float)width, fh = (float)height;
    grid_row_body(g, xs, ys, width, ix, iy);
    for (x = 0; x < width; x++) {
        float u = rint_any(ix[x]), v = rint_any(iy[x]);
        int inside = (u >= 0.0f) & (u < fw) & (v >= 0.0f) & (v < fh);
        float uc = inside ? u : 0.0f, vc = inside ? v : 0.0f;  /* in range for the conversion */
        index[x] = inside ? (int32_t)vc * width + (int32_t)uc : -1;
    }
}
DISPATCHED(nearest_row, (const grid *g, const float *xs, float ys, int width, int height, float *ix, float *iy, int32_t *index),
           (g, xs, ys, width, height, ix, iy, index))

/* bilinear, first pass: each output pixel's top-left tap (x0, y0 as ints; -2 when no tap is inside that way),
   and planes of its four taps' weights (nw, ne, sw, se) and of their sum over the taps inside (the mask) */
INLINE void
bilinear_taps_body(const grid *g, const float *restrict xs, float ys, int width, int height, int32_t *restrict x0s,
                   int32_t *restrict y0s, float *restrict w00, float *restrict w01, float *restrict w10, float *restrict w11,
                   float *restrict wm)
{
    int x;
    float fw = (float)width, fh = (float)height;
    for (x = 0; x < width; x++) {
        float gx = (xs[x] * g->a0 + ys * g->a1) + g->a2;  /* the grid of grid_row_body, inline */
        float gy = (xs[x] * g->b0 + ys * g->b1) + g->b2;
        float ixx = ((gx + 1.0f) * g->fw - 1.0f) / 2.0f;
        float iyy = ((gy + 1.0f) * g->fh - 1.0f) / 2.0f;
        float x0 = floor_any(ixx), y0 = floor_any(iyy);
        float wx = ixx - x0;
        float ex = 1.0f - wx;
        float ny = iyy - y0;
        float sy = 1.0f - ny;
        float x1 = x0 + 1.0f, y1 = y0 + 1.0f;
        float a = sy * ex, b = sy * wx, c = ny * ex, d = ny * wx;
        /* each weight where its tap is inside, else 0: one compare per select (boolean arithmetic does not vectorize) */
        float ia = x0 >= 0.0f ? a : 0.0f, ib = x1 >= 0.0f ? b : 0.0f, ic = x0 >= 0.0f ? c : 0.0f, id = x1 >= 0.0f ? d : 0.0f;
        float mask = 0.0f, tx, ty;
        ia = x0 < fw ? ia : 0.0f, ib = x1 < fw ? ib : 0.0f, ic = x0 < fw ? ic : 0.0f, id = x1 < fw ? id : 0.0f;
        ia = y0 >= 0.0f ? ia : 0.0f, ib = y0 >= 0.0f ? ib : 0.0f, ic = y1 >= 0.0f ? ic : 0.0f, id = y1 >= 0.0f ? id : 0.0f;
        ia = y0 < fh ? ia : 0.0f, ib = y0 < fh ? ib : 0.0f, ic = y1 < fh ? ic : 0.0f, id = y1 < fh ? id : 0.0f;
        mask += ia;
        mask += ib;
        mask += ic;
        mask += id;
        tx = x0 >= -1.0f ? x0 : -2.0f;  /* in range for the conversion, -2 when no tap is inside that way */
        tx = x0 < fw ? tx : -2.0f;
        ty = y0 >= -1.0f ? y0 : -2.0f;
        ty = y0 < fh ? ty : -2.0f;
        x0s[x] = (int32_t)tx;
        y0s[x] = (int32_t)ty;
        w00[x] = a, w01[x] = b, w10[x] = c, w11[x] = d, wm[x] = mask;
    }
}
DISPATCHED(bilinear_taps,
           (const grid *g, const float *restrict xs, float ys, int width, int height, int32_t *restrict x0s,
            int32_t *restrict y0s, float *restrict w00, float *restrict w01, float *restrict w10, float *restrict w11,
            float *restrict wm),
           (g, xs, ys, width, height, x0s, y0s, w00, w01, w10, w11, wm))

/* bilinear, second pass: planes of each tap's values, vals[(t * C + c) * width + x] (0 for a tap outside) */
static void
bilinear_gather(const uint8_t *src, int width, int height, int channels, const int32_t *x0s, const int32_t *y0s,
                float *vals)
{
    static const uint8_t zeros[3] = {0, 0, 0};
    size_t C = (size_t)channels, W = (size_t)width;
    int x, c, t;
    for (x = 0; x < width; x++) {
        int x0 = x0s[x], y0 = y0s[x];
        const uint8_t *px[4];
        if (x0 >= 0 && x0 < width - 1 && y0 >= 0 && y0 < height - 1) {  /* every tap inside */
            px[0] = src + ((size_t)y0 * W + (size_t)x0) * C;
            px[1] = px[0] + C;
            px[2] = px[0] + W * C;
            px[3] = px[2] + C;
        } else {
            for (t = 0; t < 4; t++) {
                int xx = x0 + (t & 1), yy = y0 + (t >> 1);
                int ok = x0 != -2 && y0 != -2 && xx >= 0 && xx < width && yy >= 0 && yy < height;
                px[t] = ok ? src + ((size_t)yy * W + (size_t)xx) * C : zeros;
            }
        }
        if (channels == 3) {
            for (t = 0; t < 4; t++) {
                vals[(size_t)(3 * t) * W + (size_t)x] = (float)px[t][0];
                vals[(size_t)(3 * t + 1) * W + (size_t)x] = (float)px[t][1];
                vals[(size_t)(3 * t + 2) * W + (size_t)x] = (float)px[t][2];
            }
        } else {
            for (t = 0; t < 4; t++)
                for (c = 0; c < channels; c++)
                    vals[((size_t)t * C + (size_t)c) * W + (size_t)x] = (float)px[t][c];
        }
    }
}

/* bilinear, third pass: channel c's plane of sum(tap * weight) in the order nw, ne, sw, se, then
   (out - fill) * mask + fill when filled, rounded */
INLINE void
bilinear_mix_body(const float *restrict vals, const float *restrict w, int width, int channels, int c, int filled, float fill,
                  uint8_t *restrict res)
{
    size_t W = (size_t)width, C = (size_t)channels;
    const float *v0 = vals + (size_t)c * W, *v1 = vals + (C + (size_t)c) * W, *v2 = vals + (2 * C + (size_t)c) * W;
    const float *v3 = vals + (3 * C + (size_t)c) * W;
    int x;
    for (x = 0; x < width; x++) {
        float a = 0.0f;
        a += v0[x] * w[x];
        a += v1[x] * w[W + x];
        a += v2[x] * w[2 * W + x];
        a += v3[x] * w[3 * W + x];
        a = filled ? (a - fill) * w[4 * W + x] + fill : a;
        res[x] = round8(a);
    }
}
DISPATCHED(bilinear_mix,
           (const float *restrict vals, const float *restrict w, int width, int channels, int c, int filled, float fill,
            uint8_t *restrict res),
           (vals, w, width, channels, c, filled, fill, res))

static int
affine(uint8_t *image, int height, int width, int channels, const double *p, ss_scratch *scratch)
{
    size_t row = (size_t)width * (size_t)channels, plane = row * (size_t)height, at = 0;
    size_t o_src, o_xs, o_ix, o_iy, o_index, o_x0s, o_w, o_vals, o_res;
    float m[6], half_w = (float)(0.5 * width), half_h = (float)(0.5 * height), fill[3];
    int bilinear = p[6] != 0, filled = p[7] != 0, x, y, c;
    grid g;
    char *block;
    uint8_t *src;
    float *xs, *ix, *iy, *w, *vals;
    int32_t *index, *x0s;
    uint8_t *res;
    for (c = 0; c < 6; c++)
        m[c] = (float)p[c];
    for (c = 0; c < channels; c++)
        fill[c] = (float)p[8 + c];
    g.a0 = m[0] / half_w, g.a1 = m[1] / half_w, g.a2 = m[2] / half_w;
    g.b0 = m[3] / half_h, g.b1 = m[4] / half_h, g.b2 = m[5] / half_h;
    g.fw = (float)width, g.fh = (float)height;
    o_src = at, at += up64(plane + 1);  /* (+1: a pixel read as 4 bytes) */
    o_xs = at, at += up64((size_t)width * sizeof(float));
    o_ix = at, at += up64((size_t)width * sizeof(float));
    o_iy = at, at += up64((size_t)width * sizeof(float));
    o_index = at, at += up64((size_t)width * sizeof(int32_t));
    o_x0s = at, at += up64((size_t)width * sizeof(int32_t));
    o_w = at, at += up64((size_t)width * 5 * sizeof(float));
    o_vals = at, at += up64((size_t)width * 4 * (size_t)channels * sizeof(float));
    o_res = at, at += up64((size_t)width * (size_t)channels);
    block = (char *)need(scratch, at);
    if (block == NULL)
        return -2;
    src = (uint8_t *)(block + o_src);
    xs = (float *)(block + o_xs);
    ix = (float *)(block + o_ix);
    iy = (float *)(block + o_iy);
    index = (int32_t *)(block + o_index);
    x0s = (int32_t *)(block + o_x0s);
    w = (float *)(block + o_w);
    vals = (float *)(block + o_vals);
    res = (uint8_t *)(block + o_res);
    memcpy(src, image, plane);
    for (x = 0; x < width; x++)
        xs[x] = (float)((double)x - (double)(width - 1) * 0.5);
    if (!bilinear) {
        uint8_t outside[4] = {0, 0, 0, 0};
        if (filled)
            for (c = 0; c < channels; c++)
                outside[c] = round8(fill[c]);
        for (y = 0; y < height; y++) {
            uint8_t *out = image + (size_t)y * row;
            nearest_row(&g, xs, (float)((double)y - (double)(height - 1) * 0.5), width, height, ix, iy, index);
            if (channels == 3) {
                for (x = 0; x < width - 1; x++, out += 3) {  /* a pixel as 4 bytes, the 4th the next one's (written next) */
                    const uint8_t *px = index[x] >= 0 ? src + (size_t)index[x] * 3 : outside;
                    memcpy(out, px, 4);
                }
                {
                    const uint8_t *px = index[x] >= 0 ? src + (size_t)index[x] * 3 : outside;
                    out[0] = px[0];
                    out[1] = px[1];
                    out[2] = px[2];
                }
            } else {
                for (x = 0; x < width; x++)
                    out[x] = index[x] >= 0 ? src[index[x]] : outside[0];
            }
        }
        return 0;
    }
    for (y = 0; y < height; y++) {
        uint8_t *out = image + (size_t)y * row;
        bilinear_taps(&g, xs, (float)((double)y - (double)(height - 1) * 0.5), width, height, x0s, index, w, w + width,
                      w + 2 * (size_t)width, w + 3 * (size_t)width, w + 4 * (size_t)width);
        bilinear_gather(src, width, height, channels, x0s, index, vals);
        for (c = 0; c < channels; c++)
            bilinear_mix(vals, w, width, channels, c, filled, fill[c], res + (size_t)c * (size_t)width);
        for (x = 0; x < width; x++)
            for (c = 0; c < channels; c++)
                out[(size_t)x * (size_t)channels + (size_t)c] = res[(size_t)c * (size_t)width + (size_t)x];
    }
    return 0;
}

/* ------------------------------------------------------------------ rot90, erase */

static int
rot90(uint8_t *image, int height, int width, int channels, int k, ss_scratch *scratch)
{
    size_t plane = (size_t)height * (size_t)width * (size_t)channels, C = (size_t)channels;
    uint8_t *src;
    int i, j, c;
    if (k == 0.0f)
        return 0;
    src = (uint8_t *)need(scratch, plane);
    if (src == NULL)
        return -2;
    memcpy(src, image, plane);
    /* out[i][j] = m[j][W-1-i] (k 1), m[H-1-i][W-1-j] (k 2), m[H-1-j][i] (k 3); k odd: H == W */
    for (i = 0; i < height; i++) {
        uint8_t *out = image + (size_t)i * (size_t)width * C;
        for (j = 0; j < width; j++) {
            size_t from;
            if (k == 1.0f)
                from = ((size_t)j * (size_t)width + (size_t)(width - 1 - i)) * C;
            else if (k == 2.0f)
                from = ((size_t)(height - 1 - i) * (size_t)width + (size_t)(width - 1 - j)) * C;
            else
                from = ((size_t)(height - 1 - j) * (size_t)width + (size_t)i) * C;
            for (c = 0; c < channels; c++)
                out[(size_t)j * C + (size_t)c] = src[from + (size_t)c];
        }
    }
    return 0;
}

/* Python's slice(start, stop).indices(n) for step 1, on whole numbers held as doubles */
static void
slice_of(double start, double stop, int n, int *from, int *to)
{
    if (start < 0) {
        start += n;
        if (start < 0)
            start = 0;
    } else if (start > n) {
        start = n;
    }
    if (stop < 0) {
        stop += n;
        if (stop < 0)
            stop = 0;
    } else if (stop > n) {
        stop = n;
    }
    *from = (int)start;
    *to = stop > start ? (int)stop : (int)start;
}

/* float64 to uint8 as NumPy's cast gives on these machines (the low byte of the int64; 0 past its range) */
static uint8_t
byte_of(double v)
{
    return fabs(v) < 9.2e18 ? (uint8_t)(int64_t)v : 0;
}

static void
erase(uint8_t *image, int height, int width, int channels, const double *p)
{
    double top = trunc(p[0]), left = trunc(p[1]), h = trunc(p[2]), w = trunc(p[3]);
    int r0, r1, c0, c1, y, x, c;
    uint8_t values[3];
    for (c = 0; c < channels; c++)
        values[c] = byte_of(p[4 + c]);
    slice_of(top, top + h, height, &r0, &r1);
    slice_of(left, left + w, width, &c0, &c1);
    for (y = r0; y < r1; y++) {
        uint8_t *out = image + ((size_t)y * (size_t)width + (size_t)c0) * (size_t)channels;
        for (x = c0; x < c1; x++)
            for (c = 0; c < channels; c++)
                *out++ = values[c];
    }
}

/* ------------------------------------------------------------------ the program */

static void
where_of(char *where, size_t size, int number, double code)
{
    if (code >= 0 && code < CODES)
        snprintf(where, size, "pixel step %d (%s)", number, NAMES[(int)code]);
    else
        snprintf(where, size, "pixel step %d (%.0f)", number, code);
}

/* The steps run on `image`, their table steps' composed tables left in `q` (see `pending`). */
static int
run_steps(uint8_t *image, int height, int width, int channels, const double *steps, int count, ss_scratch *scratch,
          char *msg, size_t msg_size, pending *q)
{
    size_t pixels = (size_t)height * (size_t)width;
    char where[420];
    int number, col, rc = 0;
    if (msg_size)
        msg[0] = '\0';
    for (number = 0; number < count && rc == 0; number++) {
        const double *row = steps + (size_t)number * SS_PIXEL_WORDS, *p = row + 1;
        double code;
        uint8_t lut[3][256];
        int v;
        for (col = 0; col < SS_PIXEL_WORDS; col++)
            if (!isfinite(row[col])) {
                snprintf(msg, msg_size, "pixel step %d: step words must be finite numbers, got %s in column %d", number,
                         isnan(row[col]) ? "nan" : row[col] > 0 ? "inf" : "-inf", col);
                return -1;
            }
        code = trunc(row[0]);
        where_of(where, sizeof(where), number, code);
        if (!(code >= 0 && code < CODES)) {
            snprintf(msg, msg_size, "%s: unknown opcode %.0f (expected 0..%d)", where, code, CODES - 1);
            return -1;
        }
        if (code != NONE && code != BRIGHTNESS && code != CONTRAST && code != POSTERIZE && code != SOLARIZE &&
            code != AUTOCONTRAST && code != EQUALIZE && code != INVERT)
            flush(image, pixels, channels, q);  /* a step that reads the pixels themselves */
        switch ((int)code) {
        case NONE:
            break;
        case BRIGHTNESS: {
            float f = (float)p[0];
            for (v = 0; v < 256; v++)
                lut[0][v] = trunc8((float)v * f);
            pend_shared(q, lut[0]);
            break;
        }
        case CONTRAST: {
            float f = (float)p[0], alpha = (float)(1.0 - p[0]), mean;
            int64_t total = 0;
            flush(image, pixels, channels, q);  /* the mean of whole pixels */
            if (channels == 3) {
                total = gray_sum(image, pixels);
            } else {
                size_t i;
                for (i = 0; i < pixels; i++)
                    total += image[i];
            }
            mean = (float)((double)total / (double)pixels);
            for (v = 0; v < 256; v++)
                lut[0][v] = trunc8(fused((float)v * f, alpha, mean));
            pend_shared(q, lut[0]);
            break;
        }
        case SATURATION:
            if (channels == 3)
                saturation(image, pixels, (float)p[0], (float)(1.0 - p[0]));
            break;
        case HUE:
            if (!isfinite((float)p[0])) {  /* a shift past float32's range: its NaN sectors have no defined pixel */
                snprintf(msg, msg_size, "%s: the hue shift must be within float32's range, got %g", where, p[0]);
                return -1;
            }
            if (channels == 3)
                hue(image, pixels, (float)p[0]);
            break;
        case SHARPNESS:
            rc = sharpness(image, height, width, channels, p[0], scratch);
            break;
        case POSTERIZE: {
            double bits = trunc(p[0]);
            uint8_t mask;
            if (bits < 0) {
                snprintf(msg, msg_size, "%s: posterize keeps 0..8 bits, got %.0f", where, bits);
                return -1;
            }
            if (bits >= 8)
                break;
            mask = (uint8_t)((((1u << (int)bits) - 1u) << (8 - (int)bits)) & 0xFFu);
            for (v = 0; v < 256; v++)
                lut[0][v] = (uint8_t)(v & mask);
            pend_shared(q, lut[0]);
            break;
        }
        case SOLARIZE: {
            float threshold = (float)p[0];
            for (v = 0; v < 256; v++)
                lut[0][v] = (float)v >= threshold ? (uint8_t)(255 - v) : (uint8_t)v;
            pend_shared(q, lut[0]);
            break;
        }
        case AUTOCONTRAST:
            autocontrast(image, pixels, channels, q);
            break;
        case EQUALIZE:
            equalize(image, pixels, channels, q);
            break;
        case INVERT:
            for (v = 0; v < 256; v++)
                lut[0][v] = (uint8_t)(255 - v);
            pend_shared(q, lut[0]);
            break;
        case GRAYSCALE:
            if (channels == 3)
                grayscale(image, pixels);
            break;
        case BLUR: {
            double kx = trunc(p[0]), ky = trunc(p[1]);
            if (floor(kx / 2) >= width || floor(ky / 2) >= height) {
                snprintf(msg, msg_size,
                         "%s: a %.0fx%.0f blur kernel needs an image wider than %.0f and taller than %.0f pixels "
                         "(reflect padding), got %dx%d",
                         where, kx, ky, floor(kx / 2), floor(ky / 2), height, width);
                return -1;
            }
            rc = blur(image, height, width, channels, kx < 0 ? 0 : (int)kx, ky < 0 ? 0 : (int)ky, p[2], p[3], scratch);
            break;
        }
        case AFFINE:
            rc = affine(image, height, width, channels, p, scratch);
            break;
        case ROT90: {
            double k = fmod(trunc(p[0]), 4.0);
            int quarter;
            if (k < 0)
                k += 4.0;
            quarter = (int)k;
            if (quarter % 2 && height != width) {
                snprintf(msg, msg_size, "%s: a quarter turn keeps the size of square images only, got %dx%d", where,
                         height, width);
                return -1;
            }
            rc = rot90(image, height, width, channels, quarter, scratch);
            break;
        }
        case ERASE:
            erase(image, height, width, channels, p);
            break;
        }
    }
    if (rc == -2)
        snprintf(msg, msg_size, "out of memory");
    return rc;
}

int
ss_pixel_steps(uint8_t *image, int height, int width, int channels, const double *steps, int count,
               ss_scratch *scratch, char *msg, size_t msg_size)
{
    pending q;
    int rc;
    q.on = 0;
    rc = run_steps(image, height, width, channels, steps, count, scratch, msg, msg_size, &q);
    if (rc == 0)
        flush(image, (size_t)height * (size_t)width, channels, &q);
    return rc;
}

int
ss_pixel_steps_table(uint8_t *image, int height, int width, int channels, const double *steps, int count,
                     ss_scratch *scratch, char *msg, size_t msg_size, uint8_t table[3][256])
{
    pending q;
    int rc;
    q.on = 0;
    rc = run_steps(image, height, width, channels, steps, count, scratch, msg, msg_size, &q);
    if (rc != 0 || !q.on)
        return rc;
    memcpy(table, q.t, sizeof(q.t));
    return 1;
}
