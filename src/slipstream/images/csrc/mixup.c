/* MixUp of a batch in one pass; see mixup.h for the contract. */
#include "mixup.h"

#include <stdint.h>
#include <string.h>

#include "resample.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")  /* (selects for the compares: no value changes) */
#endif

#include "dispatch.h"

#define TWO23 8388608.0f

INLINE void
mix_f32_body(const float *restrict x0, const float *restrict x1, float *restrict o, size_t n, float a, float b)
{
    size_t i;
    for (i = 0; i < n; i++) {
        float first = x0[i] * a, second = x1[i] * b, sum = first + second;
        o[i] = first != first ? first + 0.0f : sum;  /* two NaNs: the first one's (quieted), as x86 and NumPy give */
    }
}
DISPATCHED(mix_f32, (const float *restrict x0, const float *restrict x1, float *restrict o, size_t n, float a, float b),
           (x0, x1, o, n, a, b))

INLINE void
mix_u8_body(const uint8_t *restrict x0, const uint8_t *restrict x1, uint8_t *restrict o, size_t n, float a, float b)
{
    size_t i;
    for (i = 0; i < n; i++) {
        float first = (float)x0[i] * a, second = (float)x1[i] * b;
        float s = first + second;
        s = s > 0.0f ? s : 0.0f;  /* the bounds are whole: clipping before rounding gives the same */
        s = s < 255.0f ? s : 255.0f;
        o[i] = (uint8_t)(int32_t)((s + TWO23) - TWO23);  /* half to even (s in [0, 255]) */
    }
}
DISPATCHED(mix_u8, (const uint8_t *restrict x0, const uint8_t *restrict x1, uint8_t *restrict o, size_t n, float a, float b),
           (x0, x1, o, n, a, b))

/* NumPy's npy_halfbits_to_floatbits */
INLINE uint32_t
half_to_float_bits(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exponent = h & 0x7c00u, significand = h & 0x03ffu;
    if (exponent == 0x7c00u)  /* inf or NaN (the payload shifted, not quieted) */
        return sign + 0x7f800000u + (significand << 13);
    if (exponent != 0)
        return sign + ((((uint32_t)h & 0x7fffu) + 0x1c000u) << 13);
    if (significand == 0)
        return sign;
    {  /* subnormal: normalized */
        int shift = 0;
        significand <<= 1;
        while ((significand & 0x0400u) == 0) {
            significand <<= 1;
            shift++;
        }
        return sign + ((uint32_t)(127 - 15 - shift) << 23) + ((significand & 0x03ffu) << 13);
    }
}

/* NumPy's npy_floatbits_to_halfbits (round half to even; NaN keeps the top of its payload) */
INLINE uint16_t
float_to_half_bits(uint32_t f)
{
    uint16_t sign = (uint16_t)((f & 0x80000000u) >> 16);
    uint32_t exponent = f & 0x7f800000u, significand;
    if (exponent >= 0x47800000u) {  /* overflow, inf or NaN */
        if (exponent == 0x7f800000u && (f & 0x007fffffu) != 0) {
            uint16_t nan = (uint16_t)(0x7c00u + ((f & 0x007fffffu) >> 13));
            return (uint16_t)(sign + (nan == 0x7c00u ? nan + 1 : nan));
        }
        return (uint16_t)(sign + 0x7c00u);
    }
    if (exponent <= 0x38000000u) {  /* a subnormal half or a signed zero */
        if (exponent < 0x33000000u)
            return sign;
        exponent >>= 23;
        significand = 0x00800000u + (f & 0x007fffffu);
        significand >>= (113 - exponent);
        if ((significand & 0x00003fffu) != 0x00001000u || (f & 0x000007ffu))
            significand += 0x00001000u;
        return (uint16_t)(sign + (uint16_t)(significand >> 13));
    }
    significand = f & 0x007fffffu;
    if ((significand & 0x00003fffu) != 0x00001000u)
        significand += 0x00001000u;
    return (uint16_t)(sign + (uint16_t)((exponent - 0x38000000u) >> 13) + (uint16_t)(significand >> 13));
}

INLINE float
from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

INLINE uint32_t
to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

INLINE float
half_float(uint16_t h)
{
    return from_bits(half_to_float_bits(h));
}

static void
mix_f16(const uint16_t *x0, const uint16_t *x1, uint16_t *o, size_t n, float a, float b)
{
    size_t i;
    for (i = 0; i < n; i++) {
        uint16_t first = float_to_half_bits(to_bits(half_float(x0[i]) * a));
        uint16_t second = float_to_half_bits(to_bits(half_float(x1[i]) * b));
        float f = half_float(first), sum = f + half_float(second);
        o[i] = float_to_half_bits(to_bits(f != f ? f + 0.0f : sum));  /* two NaNs: the first one's, as in mix_f32 */
    }
}

void
ss_mixup(const void *images, void *out, size_t count, size_t per, int dtype, double lam)
{
    float a = (float)(1.0 - lam), b = (float)lam;
    size_t i;
    for (i = 0; i < count; i++) {
        size_t prev = i ? i - 1 : count - 1;  /* sample 0 with the last, as roll(1) gives */
        if (dtype == SS_F32)
            mix_f32((const float *)images + prev * per, (const float *)images + i * per, (float *)out + i * per, per, a, b);
        else if (dtype == SS_F16)
            mix_f16((const uint16_t *)images + prev * per, (const uint16_t *)images + i * per, (uint16_t *)out + i * per,
                    per, a, b);
        else
            mix_u8((const uint8_t *)images + prev * per, (const uint8_t *)images + i * per, (uint8_t *)out + i * per, per,
                   a, b);
    }
}
