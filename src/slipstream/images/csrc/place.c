/* Windows and their placement in C; see place.h. Each line mirrors images/imageops.py or
 * placement.py (named in the comments); compiled with -ffp-contract=off. */
#include "place.h"

#include <math.h>

typedef struct {
    double top, left, height, width;
    int64_t out_h, out_w;
    int flip;
} window;

/* Windows.crop */
static void
crop(window *w, double top, double left, double height, double width, int64_t out_h, int64_t out_w)
{
    double sy = w->height / (double)w->out_h, sx = w->width / (double)w->out_w;
    if (w->flip)
        left = (double)w->out_w - left - width;  /* (int64 arithmetic in NumPy: exact here too) */
    w->top = w->top + top * sy;
    w->left = w->left + left * sx;
    w->height = height * sy;
    w->width = width * sx;
    w->out_h = out_h;
    w->out_w = out_w;
}

/* ops._exp */
static double
exp_small(double x, int halvings, double half_pow)
{
    double y = x * half_pow, total;
    int k;
    total = y * (1.0 / 9) + 1.0;
    for (k = 8; k >= 1; k--) {
        total *= y;
        total *= 1.0 / k;
        total += 1.0;
    }
    for (k = 0; k < halvings; k++)
        total *= total;
    return total;
}

#define ATTEMPTS 10

/* RandomResizedCrop.place */
static void
rrc(window *w, const double *u, const double *a)
{
    int64_t height = w->out_h, width = w->out_w, h = 0, wd = 0, top, left;
    double area = (double)(height * width);
    int k, found = 0;
    for (k = 0; k < ATTEMPTS && !found; k++) {
        double target = area * (a[4] + a[5] * u[k]);
        double aspect = exp_small(a[6] + a[7] * u[ATTEMPTS + k], (int)a[8], a[11]);
        double fw = nearbyint(sqrt(target * aspect)), fh = nearbyint(sqrt(target / aspect));
        if (fw > 0 && fw <= (double)width && fh > 0 && fh <= (double)height) {
            wd = (int64_t)fw;
            h = (int64_t)fh;
            found = 1;
        }
    }
    if (found) {
        top = (int64_t)floor(u[2 * ATTEMPTS] * (double)(height - h + 1));
        left = (int64_t)floor(u[2 * ATTEMPTS + 1] * (double)(width - wd + 1));
    } else {  /* the whole image, clamped to the ratio range, centered */
        double in_ratio = (double)width / (double)height;
        wd = in_ratio > a[10] ? (int64_t)nearbyint((double)height * a[10]) : width;
        h = in_ratio < a[9] ? (int64_t)nearbyint((double)width / a[9]) : height;
        top = (height - h) / 2;
        left = (width - wd) / 2;
    }
    crop(w, (double)top, (double)left, (double)h, (double)wd, (int64_t)a[2], (int64_t)a[3]);
}

/* Resize.place */
static void
resize(window *w, double size, double fixed_h, double fixed_w)
{
    int64_t out_h, out_w;
    if (size > 0) {
        int64_t s = (int64_t)size;
        if (w->out_h > w->out_w) {
            out_h = (int64_t)((double)(s * w->out_h) / (double)w->out_w);
            out_w = s;
        } else {
            out_h = s;
            out_w = (int64_t)((double)(s * w->out_w) / (double)w->out_h);
        }
    } else {
        out_h = (int64_t)fixed_h;
        out_w = (int64_t)fixed_w;
    }
    crop(w, 0.0, 0.0, (double)w->out_h, (double)w->out_w, out_h, out_w);
}

/* CenterCrop.place: 0 when the crop is larger than the image */
static int
center(window *w, const double *a)
{
    int64_t h = (int64_t)a[2], wd = (int64_t)a[3];
    double top, left;
    if (a[4] > 0)
        resize(w, a[4], 0, 0);
    if (w->out_h < h || w->out_w < wd)
        return 0;
    top = (double)(int64_t)nearbyint((double)(w->out_h - h) / 2.0);
    left = (double)(int64_t)nearbyint((double)(w->out_w - wd) / 2.0);
    crop(w, top, left, (double)h, (double)wd, h, wd);
    return 1;
}

int
ss_place(int height, int width, const double *u, const double *program, int nops, int jpeg, int exact,
         int32_t *factor, int64_t region[4], float edges[4], uint8_t *flip, int64_t out_hw[2])
{
    window w = {0.0, 0.0, (double)height, (double)width, height, width, 0};
    int64_t f = 1, dec_h, dec_w, k;
    double sy, sx, top, left, box_h, box_w, bottom, right, margin, r0, r1, c0, c1;
    int i;

    for (i = 0; i < nops; i++) {
        const double *a = program + (size_t)i * SS_OP_WORDS;
        const double *draws = u + (int64_t)a[1];
        switch ((int)a[0]) {
        case SS_RRC: rrc(&w, draws, a); break;
        case SS_RESIZE: resize(&w, a[2], a[3], a[4]); break;
        case SS_CENTER:
            if (!center(&w, a))
                return 0;
            break;
        case SS_FLIP: w.flip = w.flip ^ (draws[0] < a[2]); break;
        default: return 0;
        }
    }
    /* placement.place */
    if (!exact && jpeg)
        for (k = 2; k <= 8; k *= 2)
            if (f * 2 == k && w.height >= (double)(w.out_h * k) && w.width >= (double)(w.out_w * k))
                f += k / 2;
    dec_h = ((int64_t)height + f - 1) / f;
    dec_w = ((int64_t)width + f - 1) / f;
    sy = (double)dec_h / (double)height;
    sx = (double)dec_w / (double)width;
    top = w.top * sy;
    left = w.left * sx;
    box_h = w.height * sy;
    box_w = w.width * sx;
    bottom = top + box_h;
    right = left + box_w;
    margin = fmax(fmax(1.0, box_h / (double)w.out_h), box_w / (double)w.out_w);
    margin = ceil(margin) + 2;
    r0 = fmax(0.0, floor(top) - margin);
    r1 = fmin((double)dec_h, ceil(bottom) + margin);
    c0 = fmax(0.0, floor(left) - margin);
    c1 = fmin((double)dec_w, ceil(right) + margin);
    *factor = (int32_t)f;
    region[0] = (int64_t)r0;
    region[1] = (int64_t)c0;
    region[2] = (int64_t)(r1 - r0);
    region[3] = (int64_t)(c1 - c0);
    edges[0] = (float)top;
    edges[1] = (float)bottom;
    edges[2] = (float)left;
    edges[3] = (float)right;
    *flip = (uint8_t)w.flip;
    out_hw[0] = w.out_h;
    out_hw[1] = w.out_w;
    return isfinite(top) && isfinite(left) && isfinite(box_h) && isfinite(box_w) && box_h > 0 && box_w > 0 &&
           edges[0] >= 0 && edges[2] >= 0 && edges[1] <= (double)dec_h && edges[3] <= (double)dec_w &&
           edges[1] > edges[0] && edges[3] > edges[2] && r1 > r0 && c1 > c0 && w.out_h >= 1 && w.out_w >= 1;
}

/* core/draws.py's SplitMix64 finalizer */
static uint64_t
mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

void
ss_draws(uint64_t row, const uint64_t *keys, const int64_t *columns, const uint64_t *counters, int ncols, double *u)
{
    int c;
    for (c = 0; c < ncols; c++) {
        uint64_t h = mix(row * UINT64_C(0x9E3779B97F4A7C15) + keys[columns[c]]);
        u[c] = (double)(mix(h + counters[c]) >> 11) * 0x1p-53;
    }
}
