/*
 * dispatch: one loop compiled twice, for AVX2 and for the baseline ISA, the AVX2 copy run where
 * the CPU has it (ss_resample_avx2(): the CPU's flags and SLIPSTREAM_NO_AVX2), for the kernels
 * whose inner loops GCC vectorizes (pixel.c, mixup.c). Both copies compute the same IEEE
 * operations in the same order, so they give the same bits.
 *
 * DISPATCHED(name, PARAMS, ARGS) defines `static void name PARAMS` from `name##_body`, an
 * always-inline function taking ARGS. INLINE marks such bodies.
 */
#ifndef SLIPSTREAM_DISPATCH_H
#define SLIPSTREAM_DISPATCH_H

#include "resample.h"

#define INLINE static inline __attribute__((always_inline))

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__APPLE__)
#define DISPATCHED(name, PARAMS, ARGS)                                                   \
    __attribute__((target("avx2"))) static void name##_avx2 PARAMS { name##_body ARGS; } \
    static void name##_base PARAMS { name##_body ARGS; }                                  \
    static void name PARAMS                                                               \
    {                                                                                     \
        if (ss_resample_avx2())                                                           \
            name##_avx2 ARGS;                                                             \
        else                                                                              \
            name##_base ARGS;                                                             \
    }
#else
#define DISPATCHED(name, PARAMS, ARGS) \
    static void name PARAMS { name##_body ARGS; }
#endif

#endif
