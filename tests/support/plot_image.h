/* plot_image.h - the plot tests' reading of a PNG trainctl drew
 * (client/plot.c, plot_compare.c): decoded with lib/input/png.c into RGB,
 * and the pixels of one exact colour counted in a rectangle, which is how
 * those tests find a series (every series, or job, has its own colour). */
#ifndef TD_TEST_PLOT_IMAGE_H
#define TD_TEST_PLOT_IMAGE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "input/png.h"
#include "plot.h"
#include "tdtest.h"

typedef struct plot_image {
    td_png png;
    td_region r;
    uint8_t *file;
    int w, h;
} plot_image;

/* Reads dir/name, which must be a PNG, as RGB. */
static inline void plot_image_read(const char *dir, const char *name,
                                   plot_image *im)
{
    size_t len;
    memset(im, 0, sizeof *im);
    im->file = td_test_slurp(dir, name, &len);
    ck_assert(td_png_is(im->file, len));
    ck_assert_int_eq(td_png_header(&im->png, im->file, len, &im->w, &im->h),
                     0);
    ck_assert_int_eq(td_png_decode(&im->png, im->file, len, 3, &im->r), 0);
}

static inline void plot_image_free(plot_image *im)
{
    td_png_free(&im->png);
    free(im->file);
}

/* Pixels of exactly rgb inside r; the rightmost column with one in *xr
 * (-1: none) when xr is not NULL. */
static inline long plot_image_count(const plot_image *im, td_plot_rect r,
                                    uint32_t rgb, int *xr)
{
    long n = 0;
    if (xr)
        *xr = -1;
    for (int y = r.y; y < r.y + r.h && y < im->h; y++) {
        const uint8_t *row = im->r.px + (size_t)y * im->r.stride;
        for (int x = r.x; x < r.x + r.w && x < im->w; x++) {
            const uint8_t *p = row + 3 * x;
            if (p[0] == (rgb >> 16 & 255) && p[1] == (rgb >> 8 & 255) &&
                p[2] == (rgb & 255)) {
                n++;
                if (xr && x > *xr)
                    *xr = x;
            }
        }
    }
    return n;
}

#endif
