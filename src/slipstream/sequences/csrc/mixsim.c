/*
 * The earliest-deadline interleave of ss.mix, the exact twin of
 * slipstream.sequences.interleave.simulate_reference (integer arithmetic
 * only). Per source, the state before a position is its count and its lag
 * lam = T * target - T * count; a source is released when its lag, with the
 * position's weight added, reaches S, and its deadline is the last position
 * by which its weights ahead add up to T - S + 1 - lam. Each position goes to
 * the released source with the earliest deadline (ties: the lowest index).
 */
#include "mixsim.h"

#include <stdio.h>
#include <string.h>

int
mix_check_frame(const mix_frame *f, char *msg, size_t size)
{
    if (f->m < 1 || f->n < 1 || f->n > INT32_MAX || f->T < 1 || f->T > MIX_T_MAX || f->S < 1 || f->S > f->T / f->n) {
        snprintf(msg, size, "bad frame: %lld pieces, %lld sources, T %lld, S %lld", (long long)f->m, (long long)f->n,
                 (long long)f->T, (long long)f->S);
        return -1;
    }
    if (f->starts[0] != 0) {
        snprintf(msg, size, "starts[0] must be 0");
        return -1;
    }
    for (int64_t k = 0; k < f->m; k++) {
        int64_t sum = 0;
        if (k && f->starts[k] <= f->starts[k - 1]) {
            snprintf(msg, size, "starts must increase (piece %lld)", (long long)k);
            return -1;
        }
        for (int64_t i = 0; i < f->n; i++) {
            int64_t x = f->w[k * f->n + i];
            if (x < 0 || x > f->T) {
                snprintf(msg, size, "weight %lld of piece %lld is not in 0..T", (long long)i, (long long)k);
                return -1;
            }
            sum += x;
        }
        if (sum != f->T) {
            snprintf(msg, size, "the weights of piece %lld sum to %lld, not T", (long long)k, (long long)sum);
            return -1;
        }
    }
    return 0;
}

int
mix_check_state(const mix_frame *f, const int64_t *lam, const int64_t *cnt, char *msg, size_t size)
{
    int64_t sum = 0;
    for (int64_t i = 0; i < f->n; i++) {
        if (lam[i] < -f->T || lam[i] > f->T || cnt[i] < 0 || cnt[i] > MIX_POS_MAX) {
            snprintf(msg, size, "the state of source %lld (lag %lld, count %lld) is out of bounds", (long long)i,
                     (long long)lam[i], (long long)cnt[i]);
            return -1;
        }
        sum += lam[i];
    }
    if (sum != 0) {
        snprintf(msg, size, "the lags must sum to 0");
        return -1;
    }
    return 0;
}

/* The last position v > u by which source i's weights over u+1..v add up to need (u when need <= 0,
 * MIX_INF when they never do); k: the piece of u, or an earlier one. */
static int64_t
due(const mix_frame *f, int64_t i, int64_t u, int64_t k, int64_t need)
{
    int64_t x = u + 1;
    if (need <= 0)
        return u;
    while (k + 1 < f->m && f->starts[k + 1] <= x)
        k++;
    for (;;) {
        int64_t weight = f->w[k * f->n + i];
        int64_t end = k + 1 < f->m ? f->starts[k + 1] : MIX_INF;
        if (weight > 0) {
            int64_t steps = (need + weight - 1) / weight;
            if (steps <= end - x)
                return x + steps - 1;
            need -= weight * (end - x);
        } else if (end == MIX_INF) {
            return MIX_INF;
        }
        x = end;
        k++;
    }
}

int
mix_run(const mix_frame *f, int64_t u0, int64_t u1, int64_t *lam, int64_t *cnt, int64_t *d, int32_t *src, int64_t *idx,
        int64_t every, int64_t *ck_lam, int64_t *ck_cnt)
{
    const int64_t n = f->n, T = f->T, S = f->S;
    int64_t lo = 0, hi = f->m - 1, k, left = every;
    const int64_t *row;
    while (lo < hi) { /* the last piece starting at or before u0 */
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (f->starts[mid] <= u0)
            lo = mid;
        else
            hi = mid - 1;
    }
    k = lo;
    row = f->w + k * n;
    for (int64_t i = 0; i < n; i++)
        d[i] = due(f, i, u0 - 1, k, T - S + 1 - lam[i]);
    for (int64_t u = u0; u < u1; u++) {
        int64_t best = -1, bd = 0;
        while (k + 1 < f->m && f->starts[k + 1] <= u) {
            k++;
            row = f->w + k * n;
        }
        for (int64_t i = 0; i < n; i++) {
            int64_t l = lam[i] + row[i];
            lam[i] = l;
            if (l > MIX_LAM_MAX)
                return -1;
            if (l >= S && (best < 0 || d[i] < bd)) {
                best = i;
                bd = d[i];
            }
        }
        if (best < 0)
            return -1; /* unreachable: the lags sum to T >= n * S here */
        lam[best] -= T;
        if (src)
            src[u - u0] = (int32_t)best;
        if (idx)
            idx[u - u0] = cnt[best];
        cnt[best]++;
        d[best] = due(f, best, u, k, T - S + 1 - lam[best]);
        if (every && --left == 0) {
            int64_t r = (u + 1 - u0) / every - 1;
            memcpy(ck_lam + r * n, lam, (size_t)n * sizeof(int64_t));
            memcpy(ck_cnt + r * n, cnt, (size_t)n * sizeof(int64_t));
            left = every;
        }
    }
    return 0;
}

int
mix_locate(const mix_frame *f, int64_t every, const int64_t *ck_lam, const int64_t *ck_cnt, const int64_t *r, int64_t count,
           int32_t *src, int64_t *idx, int64_t *scratch, int32_t *bsrc, int64_t *bidx)
{
    const int64_t n = f->n;
    int64_t *lam = scratch, *cnt = scratch + n, *d = scratch + 2 * n;
    for (int64_t j = 0; j < count;) {
        int64_t b = r[j] / every, k = j;
        while (k < count && r[k] / every == b)
            k++;
        memcpy(lam, ck_lam + b * n, (size_t)n * sizeof(int64_t));
        memcpy(cnt, ck_cnt + b * n, (size_t)n * sizeof(int64_t));
        if (mix_run(f, b * every, r[k - 1] + 1, lam, cnt, d, bsrc, bidx, 0, NULL, NULL) < 0)
            return -1;
        for (; j < k; j++) {
            src[j] = bsrc[r[j] - b * every];
            idx[j] = bidx[r[j] - b * every];
        }
    }
    return 0;
}
