/* The interleave of ss.mix (slipstream.sequences.interleave's twin). */
#ifndef SLIPSTREAM_MIXSIM_H
#define SLIPSTREAM_MIXSIM_H

#include <stddef.h>
#include <stdint.h>

#define MIX_INF INT64_MAX
#define MIX_POS_MAX ((int64_t)1 << 61)
#define MIX_T_MAX ((int64_t)1 << 56)
#define MIX_LAM_MAX ((int64_t)1 << 60)

/* The pieces' weights and the interleave's integers (see interleave.simulate_reference). */
typedef struct {
    const int64_t *w;      /* m rows of n weights, each row summing to T */
    const int64_t *starts; /* m piece starts: 0 first, increasing */
    int64_t m, n, T, S;
} mix_frame;

/* 0 when the frame is valid, else -1 and a message in msg. */
int mix_check_frame(const mix_frame *f, char *msg, size_t size);

/* 0 when (lam, cnt) is a state the interleave may start from (lags within T summing to 0). */
int mix_check_state(const mix_frame *f, const int64_t *lam, const int64_t *cnt, char *msg, size_t size);

/* Run positions u0..u1-1 from the state (lam, cnt) before u0, updated in place; d: n scratch.
 * src/idx (may be NULL): each position's source and that source's count before it; every > 0:
 * the state after every `every` positions into rows of ck_lam / ck_cnt. 0, or -1 (a lag left its
 * bounds: the state was not one the interleave reaches). */
int mix_run(const mix_frame *f, int64_t u0, int64_t u1, int64_t *lam, int64_t *cnt, int64_t *d, int32_t *src,
            int64_t *idx, int64_t every, int64_t *ck_lam, int64_t *ck_cnt);

/* The sources and counts of positions r (ascending) from the checkpoints every `every`
 * positions (row b of ck_lam / ck_cnt: the state before position b * every). scratch: 3n int64,
 * bsrc / bidx: `every` entries each. 0, or -1 as mix_run. */
int mix_locate(const mix_frame *f, int64_t every, const int64_t *ck_lam, const int64_t *ck_cnt, const int64_t *r,
               int64_t count, int32_t *src, int64_t *idx, int64_t *scratch, int32_t *bsrc, int64_t *bidx);

#endif
