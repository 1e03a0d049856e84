/* plot_int.h - what plot.c (one job) and plot_compare.c (several) share:
 * the layout's sizes, the greys, axes with round ticks, and the mapping of
 * values to pixels.  Not part of plot.h: tests use plot.h only. */
#ifndef TD_CLIENT_PLOT_INT_H
#define TD_CLIENT_PLOT_INT_H

#include <cairo.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "plot.h"

#define TD__TITLE_H 36 /* the job's title band */
#define TD__HEAD_H 28  /* a panel's title and legend, above its area */
#define TD__HEAD2_H 46 /* the same on two lines, in a narrow panel */
#define TD__NARROW 560 /* panels narrower than this: legend on line two */
#define TD__LEFT 64    /* room for the y tick labels */
#define TD__RIGHT 16
#define TD__BOTTOM 38  /* x tick labels and "step" */
#define TD__INSET 6    /* data keep this far from the area's edges */

#define TD__GRID 0xececec
#define TD__EPOCH 0xcfcfcf
#define TD__FRAME 0x505050
#define TD__TEXT 0x202020
#define TD__FAINT 0x8a8a8a

typedef struct td_plot_axis {
    double lo, hi, step;
} td_plot_axis;

/* An area and the value ranges its sides stand for. */
typedef struct td_plot_map {
    td_plot_rect area;
    td_plot_axis x, y;
} td_plot_map;

/* A finite number at key, else NAN (missing, null, not a number). */
double td_plot_num(const json_t *o, const char *key);
/* Round bounds and a tick step for about `ticks` intervals over lo..hi. */
td_plot_axis td_plot_axis_of(double lo, double hi, int ticks);
/* The top of a loss axis.  A value that dwarfs the rest (one spike of a
 * diverging epoch) would flatten every other curve: when the largest of
 * the n values v (reordered) is over 3x their 90th percentile q (n >= 5,
 * q > 0), 1.5 q (the values above run off the top); else hi. */
double td_plot_loss_top(double *v, size_t n, double hi);
/* How many of the n values v are above top. */
int td_plot_above(const double *v, size_t n, double top);
/* "N value(s) above the axis" in faint text at the top right inside the
 * area, when cut > 0. */
void td_plot_cut_note(cairo_t *cr, const td_plot_rect *area, int cut);
/* The number of tick intervals of a (a small count, or 0). */
int td_plot_ticks(const td_plot_axis *a);
/* A tick's label, with as many decimals as the step needs. */
void td_plot_tick_label(double v, double step, char *buf, size_t cap);
void td_plot_rgb(cairo_t *cr, uint32_t c);
/* Text with its left end (align 0), centre (1) or right end (2) at x. */
void td_plot_text(cairo_t *cr, double x, double y, int align,
                  const char *s);
/* A value's pixel column and row in m's area. */
double td_plot_px(const td_plot_map *m, double x);
double td_plot_py(const td_plot_map *m, double y);
/* Point i of a series (ctx): 1 with its value's x and y, 0 when it has
 * none (the line breaks there). */
typedef int (*td_plot_point_fn)(const void *ctx, size_t i, double *x,
                                double *y);
/* A series' line in rgb, 2 px, broken where a point has no value; with
 * lone_dots, a point without a neighbour on either side gets a dot so
 * that it shows.  Returns the number of values drawn. */
int td_plot_line(cairo_t *cr, const td_plot_map *m, uint32_t rgb, size_t n,
                 td_plot_point_fn pt, const void *ctx, int lone_dots);
/* The grid, the tick labels of both axes and the x axis' name under m's
 * area (the vertical lines are the caller's: epoch boundaries). */
void td_plot_axes(cairo_t *cr, const td_plot_map *m, const char *xlabel);
/* The area's frame and the panel's bold title in its header; returns
 * where a legend on the title's line may start. */
double td_plot_frame(cairo_t *cr, const td_plot_rect *whole,
                     const td_plot_rect *area, const char *title);
/* A white width x height image to draw on, its fonts set; NULL with err
 * said when it cannot be made. */
cairo_t *td_plot_begin(int width, int height, char *err, size_t errcap);
/* Writes what cr drew to the PNG at path and frees cr and its image; 0,
 * or -ENOMEM / -EIO with err naming the path and why. */
int td_plot_finish(cairo_t *cr, const char *path, char *err, size_t errcap);

#endif
