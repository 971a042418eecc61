/* Pillow's antialiased resampling in C; see resample.h for the contract.
 *
 * Compiled with -ffp-contract=off: a fused multiply-add would round once
 * where Pillow, NumPy and numba round twice, and move a coefficient by one.
 */
#include "resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SS_INLINE static inline __attribute__((always_inline))

/* On x86-64 (GCC or clang) the two passes are compiled twice, for AVX2 and for
   the baseline, and the horizontal pass has an eight-row AVX2 form; which runs
   is decided per call from the CPU's own cpuid (integer work only, so both give
   the same bits). Not target_clones or __builtin_cpu_supports: their feature
   table comes from the compiler's runtime library, and the one zig cc links
   (the manylinux wheels' compiler) reports no features at all. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__APPLE__)
#define SS_X86 1
#include <cpuid.h>
#include <immintrin.h>

/* Whether this CPU and OS run AVX2: cpuid's AVX2 bit, and the AVX state enabled by the OS (OSXSAVE, XCR0);
   never when SLIPSTREAM_NO_AVX2 is set (not "" or "0": the baseline passes, for tests and comparisons). */
static int
detect_avx2(void)
{
    unsigned int a, b, c, d, lo, hi;
    const char *off = getenv("SLIPSTREAM_NO_AVX2");
    if (off != NULL && off[0] != '\0' && strcmp(off, "0") != 0)
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX))
        return 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6) != 6)  /* the OS saves the SSE and AVX registers */
        return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (b & bit_AVX2) != 0;
}

/* detect_avx2(), asked once: 0 unknown, 1 no, 2 yes (threads that race store the same answer). */
static int
have_avx2(void)
{
    static int known;
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v == 0) {
        v = detect_avx2() ? 2 : 1;
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return v == 2;
}
#define SS_AVX2 __attribute__((target("avx2")))
/* static void name(PARAMS): name##_body (always inlined) compiled twice, the AVX2 copy called where the CPU has it */
#define SS_DISPATCHED(name, PARAMS, ARGS)                                                                             \
    SS_AVX2 static void name##_avx2(PARAMS) { name##_body(ARGS); }                                                    \
    static void name(PARAMS)                                                                                          \
    {                                                                                                                 \
        if (have_avx2())                                                                                              \
            name##_avx2(ARGS);                                                                                        \
        else                                                                                                          \
            name##_body(ARGS);                                                                                        \
    }
#else
#define SS_X86 0
#define SS_DISPATCHED(name, PARAMS, ARGS) \
    static void name(PARAMS) { name##_body(ARGS); }
#endif

#define PRECISION_BITS 22
#define HALF (1 << (PRECISION_BITS - 1))
#define ONE ((double)(1 << PRECISION_BITS))

SS_INLINE uint8_t
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

/* Horizontal pass, as numba_passes.py does it: every output gets the same
   number of taps (`taps`, zero weights added, the first tap moved left where
   the window would read past the row), indexed by destination (mirrored with
   flip); two rows at once, byte p of the first in the low 32 bits of a uint64
   and of the second in the high 32 bits. The weights are >= 0 and sum to
   about 1 << 22, so each half's sum stays below 2**31 and never carries into
   the other: one multiply-add serves both rows. */

#define ROW_BITS 32
#define LOW_ROW ((UINT64_C(1) << ROW_BITS) - 1)
#define HALF_PAIR ((uint64_t)HALF | ((uint64_t)HALF << ROW_BITS))
#define HIGH_SHIFT (ROW_BITS + PRECISION_BITS)

SS_INLINE uint8_t
low8(uint64_t s)
{
    uint64_t v = (s & LOW_ROW) >> PRECISION_BITS;
    return (uint8_t)(v > 255 ? 255 : v);
}

SS_INLINE uint8_t
high8(uint64_t s)
{
    uint64_t v = s >> HIGH_SHIFT;
    return (uint8_t)(v > 255 ? 255 : v);
}

/* One pair of rows (`packed`), `taps` taps per output: a constant in the
   instances below, so that the tap loop unrolls. */
SS_INLINE void
hrow(const uint64_t *restrict packed, uint8_t *restrict o0, uint8_t *restrict o1, const int *restrict start,
     const uint64_t *restrict kp, int out_w, int taps, int channels, size_t sx, size_t sc)
{
    int xx, t;
    if (channels == 3) {
        for (xx = 0; xx < out_w; xx++) {
            const uint64_t *p = packed + (size_t)start[xx] * 3, *k = kp + (size_t)xx * (size_t)taps;
            uint64_t s0 = HALF_PAIR, s1 = HALF_PAIR, s2 = HALF_PAIR;
            size_t q = (size_t)xx * sx;
            for (t = 0; t < taps; t++) {
                s0 += p[3 * t] * k[t];
                s1 += p[3 * t + 1] * k[t];
                s2 += p[3 * t + 2] * k[t];
            }
            o0[q] = low8(s0);
            o0[q + sc] = low8(s1);
            o0[q + 2 * sc] = low8(s2);
            o1[q] = high8(s0);
            o1[q + sc] = high8(s1);
            o1[q + 2 * sc] = high8(s2);
        }
    } else {
        for (xx = 0; xx < out_w; xx++) {
            const uint64_t *p = packed + start[xx], *k = kp + (size_t)xx * (size_t)taps;
            uint64_t s0 = HALF_PAIR;
            for (t = 0; t < taps; t++)
                s0 += p[t] * k[t];
            o0[(size_t)xx * sx] = low8(s0);
            o1[(size_t)xx * sx] = high8(s0);
        }
    }
}

#define HROW_FIXED(T)                                                                                  \
    SS_INLINE void hrow_##T(const uint64_t *packed, uint8_t *o0, uint8_t *o1, const int *start,          \
                         const uint64_t *kp, int out_w, int channels, size_t sx, size_t sc)            \
    {                                                                                                  \
        hrow(packed, o0, o1, start, kp, out_w, T, channels, sx, sc);                                   \
    }
HROW_FIXED(1)
HROW_FIXED(2)
HROW_FIXED(3)
HROW_FIXED(4)
HROW_FIXED(5)
HROW_FIXED(6)

/* Pads the taps (see above): start[j] and kp[j * taps ...] for destination
   j; returns taps. `shift` is the first source column the rows hold. */
SS_INLINE int
pad_taps(const int *bounds, const int32_t *kk, int ksize, int in_size, int out_w, int flip, int shift,
         int *start, uint64_t *kp)
{
    int taps = 1, xx, t;
    for (xx = 0; xx < out_w; xx++)
        if (bounds[2 * xx + 1] > taps)
            taps = bounds[2 * xx + 1];
    if (taps > in_size)
        taps = in_size;
    memset(kp, 0, sizeof(uint64_t) * (size_t)out_w * (size_t)taps);
    for (xx = 0; xx < out_w; xx++) {
        int j = flip ? out_w - 1 - xx : xx, xmin = bounds[2 * xx];
        int first = xmin < in_size - taps ? xmin : in_size - taps;
        start[j] = first - shift;
        for (t = 0; t < bounds[2 * xx + 1]; t++)
            kp[(size_t)j * (size_t)taps + (size_t)(xmin - first + t)] = (uint64_t)kk[(size_t)xx * (size_t)ksize + (size_t)t];
    }
    return taps;
}

#if SS_X86
/* The horizontal pass on eight rows at once (AVX2): the same integer sums as
   hrow's, each in its own 32-bit lane, so the same bits. The columns the
   windows read are transposed from the eight rows into `packed` (byte p of
   row l at packed[8 * p + l]), every output is taps multiply-adds of eight
   lanes, and the results (byte q of row l at obuf[8 * q + l], q the output's
   position in its row segment) are transposed back into the rows. */

/* An 8x8 byte transpose: eight 8-byte rows in, eight 8-byte columns out (two per vector). */
SS_AVX2 static inline void
transpose8(const __m128i a[8], __m128i v[4])
{
    __m128i t0 = _mm_unpacklo_epi8(a[0], a[1]), t1 = _mm_unpacklo_epi8(a[2], a[3]);
    __m128i t2 = _mm_unpacklo_epi8(a[4], a[5]), t3 = _mm_unpacklo_epi8(a[6], a[7]);
    __m128i u0 = _mm_unpacklo_epi16(t0, t1), u1 = _mm_unpackhi_epi16(t0, t1);
    __m128i u2 = _mm_unpacklo_epi16(t2, t3), u3 = _mm_unpackhi_epi16(t2, t3);
    v[0] = _mm_unpacklo_epi32(u0, u2);
    v[1] = _mm_unpackhi_epi32(u0, u2);
    v[2] = _mm_unpacklo_epi32(u1, u3);
    v[3] = _mm_unpackhi_epi32(u1, u3);
}

/* The eight lanes' sums, shifted and clipped to uint8 as low8/high8 do, stored at `o`. */
SS_AVX2 static inline void
store8(__m256i acc, uint8_t *o)
{
    __m256i v = _mm256_srli_epi32(acc, PRECISION_BITS);
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64((__m128i *)o, _mm_packus_epi16(w, w));
}

/* Rows l < `valid` of the 8-row block at `obuf` (segment of `len` outputs) into row l at dst + l * stride. */
SS_AVX2 static void
untranspose(const uint8_t *obuf, size_t len, int valid, uint8_t *dst, size_t stride)
{
    size_t q = 0;
    int l;
    for (; q + 8 <= len; q += 8) {
        __m128i a[8], v[4];
        for (l = 0; l < 8; l++)
            a[l] = _mm_loadl_epi64((const __m128i *)(obuf + 8 * (q + (size_t)l)));
        transpose8(a, v);
        for (l = 0; l < valid; l++) {
            __m128i x = v[l >> 1];
            if (l & 1)
                x = _mm_unpackhi_epi64(x, x);
            _mm_storel_epi64((__m128i *)(dst + (size_t)l * stride + q), x);
        }
    }
    for (; q < len; q++)
        for (l = 0; l < valid; l++)
            dst[(size_t)l * stride + q] = obuf[8 * q + (size_t)l];
}

SS_AVX2 static void
hpass8(const uint8_t *in, size_t in_stride, int rows, int channels, int taps, const int *start, const uint64_t *kp,
       int out_w, uint8_t *out, size_t out_stride, size_t sx, size_t sc, size_t lowest, size_t n, int32_t *k32,
       uint8_t *packed, uint8_t *obuf)
{
    size_t total = (size_t)out_w * (size_t)taps, i, p;
    /* where output (x, c) lies in obuf, and the row segments obuf's positions are stored to */
    int dense = !(sx == 1 && channels > 1);  /* HWC (or one channel): one segment of out_w * channels */
    size_t osx = dense ? (size_t)channels : 1, osc = dense ? 1 : (size_t)out_w;
    int r, l, xx, t, c;
    for (i = 0; i < total; i++)
        k32[i] = (int32_t)kp[i];
    for (r = 0; r < rows; r += 8) {
        int valid = rows - r < 8 ? rows - r : 8;
        const uint8_t *src[8];
        for (l = 0; l < 8; l++)
            src[l] = in + (size_t)(r + (l < valid ? l : valid - 1)) * in_stride;  /* missing rows repeat the last */
        for (p = lowest; p + 8 <= n; p += 8) {
            __m128i a[8], v[4];
            for (l = 0; l < 8; l++)
                a[l] = _mm_loadl_epi64((const __m128i *)(src[l] + p));
            transpose8(a, v);
            for (l = 0; l < 4; l++)
                _mm_storeu_si128((__m128i *)(packed + 8 * p + 16 * (size_t)l), v[l]);
        }
        for (; p < n; p++)
            for (l = 0; l < 8; l++)
                packed[8 * p + (size_t)l] = src[l][p];
        if (channels == 3) {
            for (xx = 0; xx < out_w; xx++) {
                const uint8_t *q = packed + 8 * (size_t)start[xx] * 3;
                const int32_t *k = k32 + (size_t)xx * (size_t)taps;
                __m256i s0 = _mm256_set1_epi32(HALF), s1 = s0, s2 = s0;
                for (t = 0; t < taps; t++, q += 24) {
                    __m256i w = _mm256_set1_epi32(k[t]);
                    s0 = _mm256_add_epi32(s0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q)), w));
                    s1 = _mm256_add_epi32(s1, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8))), w));
                    s2 = _mm256_add_epi32(s2, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + 16))), w));
                }
                store8(s0, obuf + 8 * ((size_t)xx * osx));
                store8(s1, obuf + 8 * ((size_t)xx * osx + osc));
                store8(s2, obuf + 8 * ((size_t)xx * osx + 2 * osc));
            }
        } else {
            for (xx = 0; xx < out_w; xx++) {
                const uint8_t *q = packed + 8 * (size_t)start[xx];
                const int32_t *k = k32 + (size_t)xx * (size_t)taps;
                __m256i s0 = _mm256_set1_epi32(HALF);
                for (t = 0; t < taps; t++, q += 8)
                    s0 = _mm256_add_epi32(s0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q)),
                                                                 _mm256_set1_epi32(k[t])));
                store8(s0, obuf + 8 * (size_t)xx);
            }
        }
        if (dense)
            untranspose(obuf, (size_t)out_w * (size_t)channels, valid, out + (size_t)r * out_stride, out_stride);
        else
            for (c = 0; c < channels; c++)
                untranspose(obuf + 8 * (size_t)c * (size_t)out_w, (size_t)out_w, valid,
                            out + (size_t)r * out_stride + (size_t)c * sc, out_stride);
    }
}
#endif

/* The bytes of a row the horizontal pass reads: from the leftmost window's start (`lowest`) to the furthest end (`n`). */
SS_INLINE void
columns_read(const int *start, int out_w, int taps, int channels, size_t *lowest, size_t *n)
{
    int xx;
    *n = 0;
    *lowest = (size_t)-1;
    for (xx = 0; xx < out_w; xx++) {
        size_t begin = (size_t)start[xx] * (size_t)channels, end = (size_t)(start[xx] + taps) * (size_t)channels;
        if (end > *n)
            *n = end;
        if (begin < *lowest)
            *lowest = begin;
    }
}

/* Horizontal pass: `rows` rows of `in` (interleaved pixels; the first is
   source column `shift`, and the rows hold the columns up to `in_size`) into
   `out`: output (r, x, c) at out[r * out_stride + x * sx + c * sc]. Scratch:
   `start` (out_w ints), `kp` (out_w * ksize uint64s) and `packed`
   ((in_size - shift) * channels uint64s); with the eight-row pass, `k32`
   (out_w * ksize int32s) and `obuf` (out_w * channels * 8 bytes) too. */
SS_INLINE void
hpass_rows_body(const uint8_t *in, size_t in_stride, int rows, int channels, int in_size, int shift, const int *bounds,
      const int32_t *kk, int ksize, int out_w, int flip, uint8_t *out, size_t out_stride, size_t sx, size_t sc,
      int *start, uint64_t *kp, uint64_t *packed)
{
    int taps = pad_taps(bounds, kk, ksize, in_size, out_w, flip, shift, start, kp);
    size_t n, lowest, p;
    int r;
    columns_read(start, out_w, taps, channels, &lowest, &n);
    for (r = 0; r < rows; r += 2) {
        int r1 = r + 1 < rows ? r + 1 : r;  /* an odd last row is paired with itself */
        const uint8_t *restrict lo = in + (size_t)r * in_stride, *restrict hi = in + (size_t)r1 * in_stride;
        uint8_t *o0 = out + (size_t)r * out_stride, *o1 = out + (size_t)r1 * out_stride;
        for (p = lowest; p < n; p++)
            packed[p] = (uint64_t)lo[p] | ((uint64_t)hi[p] << ROW_BITS);
        switch (taps) {
        case 1: hrow_1(packed, o0, o1, start, kp, out_w, channels, sx, sc); break;
        case 2: hrow_2(packed, o0, o1, start, kp, out_w, channels, sx, sc); break;
        case 3: hrow_3(packed, o0, o1, start, kp, out_w, channels, sx, sc); break;
        case 4: hrow_4(packed, o0, o1, start, kp, out_w, channels, sx, sc); break;
        case 5: hrow_5(packed, o0, o1, start, kp, out_w, channels, sx, sc); break;
        case 6: hrow_6(packed, o0, o1, start, kp, out_w, channels, sx, sc); break;
        default: hrow(packed, o0, o1, start, kp, out_w, taps, channels, sx, sc); break;
        }
    }
}

#define HPASS_ROWS_ARGS in, in_stride, rows, channels, in_size, shift, bounds, kk, ksize, out_w, flip, out, out_stride, sx, sc, start, kp, packed
#define HPASS_ROWS_PARAMS const uint8_t *in, size_t in_stride, int rows, int channels, int in_size, int shift, \
    const int *bounds, const int32_t *kk, int ksize, int out_w, int flip, uint8_t *out, size_t out_stride, size_t sx, \
    size_t sc, int *start, uint64_t *kp, uint64_t *packed
/* hpass_rows: hpass_rows_body compiled for this CPU's AVX2 where it has it, else for the baseline. */
SS_DISPATCHED(hpass_rows, HPASS_ROWS_PARAMS, HPASS_ROWS_ARGS)

static void
hpass(const uint8_t *in, size_t in_stride, int rows, int channels, int in_size, int shift, const int *bounds,
      const int32_t *kk, int ksize, int out_w, int flip, uint8_t *out, size_t out_stride, size_t sx, size_t sc,
      int *start, uint64_t *kp, uint64_t *packed, int32_t *k32, uint8_t *obuf)
{
#if SS_X86
    if (rows >= 4 && have_avx2()) {
        int taps = pad_taps(bounds, kk, ksize, in_size, out_w, flip, shift, start, kp);
        size_t n, lowest;
        columns_read(start, out_w, taps, channels, &lowest, &n);
        hpass8(in, in_stride, rows, channels, taps, start, kp, out_w, out, out_stride, sx, sc, lowest, n, k32,
               (uint8_t *)packed, obuf);
        return;
    }
#else
    (void)k32;
    (void)obuf;
#endif
    hpass_rows(in, in_stride, rows, channels, in_size, shift, bounds, kk, ksize, out_w, flip, out, out_stride, sx, sc,
               start, kp, packed);
}

/* Vertical pass over `n` bytes of each row (`in` starts at the first column
   read; tap t of output row yy reads row bounds[2 * yy] + t - shift). Each
   output row is cut into `nseg` equal segments; segment g of row yy goes to
   out + g * gs + yy * rs (one segment: rows; one per channel: planes). */
SS_INLINE void
vpass_body(const uint8_t *restrict in, size_t in_stride, size_t n, int shift, const int *restrict bounds,
      const int32_t *restrict kk, int ksize, int out_h, int32_t *restrict acc, uint8_t *restrict out, int nseg,
      size_t gs, size_t rs)
{
    int yy, y, g;
    size_t i, seg = n / (size_t)nseg;
    for (yy = 0; yy < out_h; yy++) {
        const int32_t *k = kk + (size_t)yy * (size_t)ksize;
        int ymin = bounds[2 * yy] - shift, count = bounds[2 * yy + 1];
        for (i = 0; i < n; i++)
            acc[i] = HALF;
        for (y = 0; y < count; y++) {
            const uint8_t *restrict row = in + (size_t)(ymin + y) * in_stride;
            int32_t weight = k[y];
            for (i = 0; i < n; i++)
                acc[i] += row[i] * weight;
        }
        for (g = 0; g < nseg; g++) {
            uint8_t *o = out + (size_t)g * gs + (size_t)yy * rs;
            const int32_t *a = acc + (size_t)g * seg;
            for (i = 0; i < seg; i++)
                o[i] = clip8(a[i]);
        }
    }
}

#define VPASS_ARGS in, in_stride, n, shift, bounds, kk, ksize, out_h, acc, out, nseg, gs, rs
#define VPASS_PARAMS const uint8_t *restrict in, size_t in_stride, size_t n, int shift, const int *restrict bounds, \
    const int32_t *restrict kk, int ksize, int out_h, int32_t *restrict acc, uint8_t *restrict out, int nseg, size_t gs, \
    size_t rs
/* vpass: vpass_body compiled for this CPU's AVX2 where it has it, else for the baseline. */
SS_DISPATCHED(vpass, VPASS_PARAMS, VPASS_ARGS)

int
ss_resample_avx2(void)
{
#if SS_X86
    return have_avx2();
#else
    return 0;
#endif
}

int
ss_resample(const uint8_t *src, int height, int width, int channels, size_t stride,
            const float edges[4], int out_h, int out_w, int box_filter, int flip, int chw,
            uint8_t *res, ss_scratch *scratch)
{
    size_t plane = (size_t)out_h * (size_t)out_w;
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
    size_t o_start = o_tmp + round16(tmp_bytes);
    size_t o_kp = o_start + round16(sizeof(int) * (size_t)out_w);
    size_t o_packed = o_kp + round16(sizeof(uint64_t) * (size_t)out_w * (size_t)kh_size);
    size_t o_k32 = o_packed + round16(sizeof(uint64_t) * (size_t)width * (size_t)channels);
    size_t o_obuf = o_k32 + round16(sizeof(int32_t) * (size_t)out_w * (size_t)kh_size);
    char *block = scratch_get(scratch, o_obuf + 8 * (size_t)out_w * (size_t)channels);
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
        /* the rows of tmp laid out as the output's: planar per row for CHW, then one segment per plane */
        hpass(src + (size_t)first * stride, stride, last - first, channels, width, 0, xb, kh, kh_size, out_w, flip, tmp,
              row_bytes, chw ? 1 : (size_t)channels, chw ? (size_t)out_w : 1,
              (int *)(block + o_start), (uint64_t *)(block + o_kp), (uint64_t *)(block + o_packed),
              (int32_t *)(block + o_k32), (uint8_t *)(block + o_obuf));
        if (chw)
            vpass(tmp, row_bytes, row_bytes, first, yb, kv, kv_size, out_h, acc, res, channels, plane, (size_t)out_w);
        else
            vpass(tmp, row_bytes, row_bytes, first, yb, kv, kv_size, out_h, acc, res, 1, 0, row_bytes);
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
        vpass(src + (size_t)first * (size_t)channels, stride, cols, 0, yb, kv, kv_size, out_h, acc, tmp, 1, 0, cols);
        hpass(tmp, cols, out_h, channels, last, first, xb, kh, kh_size, out_w, flip, res,
              chw ? (size_t)out_w : row_bytes, chw ? 1 : (size_t)channels, chw ? plane : 1,
              (int *)(block + o_start), (uint64_t *)(block + o_kp), (uint64_t *)(block + o_packed),
              (int32_t *)(block + o_k32), (uint8_t *)(block + o_obuf));
    }
    return 0;
}

/* out[i] = the table's value of res[i] for its channel (planes with chw), for
   4-byte (float32) or 2-byte (float16 bits) values: the writer is the same. */
#define LUT_WRITE(T)                                                                                   \
    static void lut_write_##T(const uint8_t *res, size_t n, int channels, int chw, size_t plane,      \
                              const T *t, T *o)                                                        \
    {                                                                                                  \
        size_t i;                                                                                      \
        int c;                                                                                         \
        if (chw)                                                                                       \
            for (c = 0; c < channels; c++)                                                             \
                for (i = (size_t)c * plane; i < (size_t)(c + 1) * plane; i++)                          \
                    o[i] = t[c * 256 + res[i]];                                                        \
        else                                                                                           \
            for (i = 0; i < n; i++)                                                                    \
                o[i] = t[(int)(i % (size_t)channels) * 256 + res[i]];                                  \
    }
LUT_WRITE(float)
LUT_WRITE(uint16_t)

void
ss_write(const uint8_t *res, size_t n, int channels, int chw, size_t plane, int dtype, const void *lut, void *out)
{
    if (dtype == SS_F32)
        lut_write_float(res, n, channels, chw, plane, (const float *)lut, (float *)out);
    else
        lut_write_uint16_t(res, n, channels, chw, plane, (const uint16_t *)lut, (uint16_t *)out);
}
