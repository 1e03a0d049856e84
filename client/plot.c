/* plot.c - see plot.h.  Every coordinate here is in pixels of the image;
 * a series is read straight from the record's arrays each time it is
 * needed (range, line, markers), so nothing is copied. */
#include "plot.h"
#include "plot_int.h"

#include <cairo.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

/* The colours are tab10's (as matplotlib's default cycle), one per series;
 * the frame, grid, epoch lines and text are greys, so no series colour is
 * drawn by anything but its series. */
const td_plot_series_info td_plot_series[TD_PLOT_NSERIES] = {
    [TD_PLOT_S_LOSS_WINDOW] = {"train_loss", "train loss (window)",
                               TD_PLOT_LOSS, 0, 1, 0x1f77b4},
    [TD_PLOT_S_LOSS_TRAIN] = {"train_loss", "train loss (epoch)",
                              TD_PLOT_LOSS, 1, 1, 0xff7f0e},
    [TD_PLOT_S_LOSS_VAL] = {"val_loss", "val loss", TD_PLOT_LOSS, 1, 1,
                            0xd62728},
    [TD_PLOT_S_ACC_TRAIN] = {"train_acc", "train acc", TD_PLOT_ACC, 1, 100,
                             0x2ca02c},
    [TD_PLOT_S_ACC_VAL] = {"val_acc", "val acc", TD_PLOT_ACC, 1, 100,
                           0x9467bd},
    [TD_PLOT_S_SPEED] = {"samples_per_s", "samples/s", TD_PLOT_SPEED, 0, 1,
                         0x17becf},
    [TD_PLOT_S_DEVICE_IDLE] = {"device_idle_ratio", "device idle",
                               TD_PLOT_IDLE, 0, 100, 0xe377c2},
    [TD_PLOT_S_INPUT_WAIT] = {"input_wait_ratio", "input wait",
                              TD_PLOT_IDLE, 0, 100, 0x8c564b},
};

static const char *const td__panel_title[TD_PLOT_NPANELS] = {
    "loss", "accuracy (%)", "throughput (samples/s)", "idle (% of time)"};


void td_plot_layout(int width, int height, int panel, td_plot_rect *whole,
                    td_plot_rect *area)
{
    int pw = width / 2, ph = (height - TD__TITLE_H) / 2;
    td_plot_rect w = {(panel % 2) * pw, TD__TITLE_H + (panel / 2) * ph, pw,
                      ph};
    if (whole)
        *whole = w;
    int head = pw < TD__NARROW ? TD__HEAD2_H : TD__HEAD_H;
    if (area)
        *area = (td_plot_rect){w.x + TD__LEFT, w.y + head,
                               w.w - TD__LEFT - TD__RIGHT,
                               w.h - head - TD__BOTTOM};
}

/* A finite number at key, else NAN (missing, null, not a number). */
double td_plot_num(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        return NAN;
    double d = json_number_value(v);
    return isfinite(d) ? d : NAN;
}

/* One series as drawn: its entries and how to read them. */
typedef struct td__series {
    const td_plot_series_info *info;
    const json_t *src; /* the history or curve array */
    size_t n;
    int per_epoch;     /* markers (history), else a line (curve) */
} td__series;

/* Point i of s; 0 when its step or value is missing. */
static int td__point(const td__series *s, size_t i, double *x, double *y)
{
    const json_t *e = json_array_get(s->src, i);
    *x = td_plot_num(e, "step");
    *y = td_plot_num(e, s->info->key) * s->info->scale;
    return !isnan(*x) && !isnan(*y);
}

/* 1, 2 or 5 times a power of ten, near x > 0. */
static double td_plot__nice(double x)
{
    double e = pow(10, floor(log10(x))), f = x / e;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * e;
}

/* Round bounds and a tick step for about `ticks` intervals over lo..hi. */
static int td__cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double td_plot_loss_top(double *v, size_t n, double hi)
{
    if (n < 5)
        return hi;
    qsort(v, n, sizeof *v, td__cmp_double);
    double q = v[(size_t)floor(0.9 * (double)(n - 1))];
    return q > 0 && v[n - 1] > 3 * q ? 1.5 * q : hi;
}

int td_plot_above(const double *v, size_t n, double top)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += v[i] > top;
    return k;
}

void td_plot_cut_note(cairo_t *cr, const td_plot_rect *area, int cut)
{
    char s[64];
    if (cut <= 0)
        return;
    snprintf(s, sizeof s, "%d value%s above the axis", cut,
             cut == 1 ? "" : "s");
    cairo_set_font_size(cr, 11);
    td_plot_rgb(cr, TD__FAINT);
    td_plot_text(cr, area->x + area->w - 6, area->y + 14, 2, s);
}

td_plot_axis td_plot_axis_of(double lo, double hi, int ticks)
{
    if (!(hi > lo)) {
        double pad = fabs(lo) * 0.1;
        if (pad == 0)
            pad = 1;
        lo -= pad;
        hi += pad;
    }
    td_plot_axis a;
    a.step = td_plot__nice((hi - lo) / ticks);
    a.lo = floor(lo / a.step + 1e-9) * a.step;
    a.hi = ceil(hi / a.step - 1e-9) * a.step;
    /* Values too close together for doubles to step between (1e9 and
     * 1e9 + 1e-7): the bare range, one interval. */
    if (!isfinite(a.step) || !(a.hi > a.lo) ||
        !((a.hi - a.lo) / a.step <= 4.0 * ticks)) {
        a.lo = lo;
        a.hi = hi;
        a.step = hi - lo;
    }
    return a;
}

/* The number of tick intervals of a (a small count, or 0). */
int td_plot_ticks(const td_plot_axis *a)
{
    double n = round((a->hi - a->lo) / a->step);
    return n >= 0 && n <= 100 ? (int)n : 0;
}

/* A tick's label, with as many decimals as the step needs; "12k" for
 * thousands once they are long. */
void td_plot_tick_label(double v, double step, char *buf, size_t cap)
{
    if (fabs(v) < step * 1e-6)
        v = 0;
    if (step >= 1000 && fabs(v) >= 10000 && fmod(v, 1000) == 0) {
        snprintf(buf, cap, "%.0fk", v / 1000);
        return;
    }
    int dec = step >= 1 ? 0 : (int)fmin(ceil(-log10(step) - 1e-9), 12);
    snprintf(buf, cap, "%.*f", dec, v);
}

void td_plot_rgb(cairo_t *cr, uint32_t c)
{
    cairo_set_source_rgb(cr, ((c >> 16) & 255) / 255.0,
                         ((c >> 8) & 255) / 255.0, (c & 255) / 255.0);
}

/* Text with its left end (align 0), centre (1) or right end (2) at x. */
void td_plot_text(cairo_t *cr, double x, double y, int align,
                     const char *s)
{
    cairo_text_extents_t te;
    cairo_text_extents(cr, s, &te);
    cairo_move_to(cr, x - align * te.x_advance / 2, y);
    cairo_show_text(cr, s);
}

/* The marker of a per-epoch series: squares for train, circles for val,
 * so the two read apart without colour too. */
static void td__marker(cairo_t *cr, const td_plot_series_info *info,
                       double x, double y)
{
    if (strncmp(info->key, "val_", 4) == 0)
        cairo_arc(cr, x, y, 4, 0, 2 * M_PI);
    else
        cairo_rectangle(cr, x - 3.5, y - 3.5, 7, 7);
    cairo_fill(cr);
}

double td_plot_px(const td_plot_map *m, double x)
{
    return m->area.x + TD__INSET +
           (x - m->x.lo) / (m->x.hi - m->x.lo) * (m->area.w - 2 * TD__INSET);
}

double td_plot_py(const td_plot_map *m, double y)
{
    return m->area.y + m->area.h - TD__INSET -
           (y - m->y.lo) / (m->y.hi - m->y.lo) * (m->area.h - 2 * TD__INSET);
}

int td_plot_line(cairo_t *cr, const td_plot_map *m, uint32_t rgb, size_t n,
                 td_plot_point_fn pt, const void *ctx, int lone_dots)
{
    int drawn = 0, run = 0;
    double x, y, ox, oy;
    td_plot_rgb(cr, rgb);
    cairo_set_line_width(cr, 2);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    for (size_t i = 0; i < n; i++) {
        if (!pt(ctx, i, &x, &y)) {
            run = 0;
            continue;
        }
        if (run++ == 0)
            cairo_move_to(cr, td_plot_px(m, x), td_plot_py(m, y));
        else
            cairo_line_to(cr, td_plot_px(m, x), td_plot_py(m, y));
        drawn++;
    }
    cairo_stroke(cr);
    for (size_t i = 0; lone_dots && i < n; i++)
        if (pt(ctx, i, &x, &y) && (i == 0 || !pt(ctx, i - 1, &ox, &oy)) &&
            (i + 1 == n || !pt(ctx, i + 1, &ox, &oy))) {
            cairo_arc(cr, td_plot_px(m, x), td_plot_py(m, y), 2.5, 0,
                      2 * M_PI);
            cairo_fill(cr);
        }
    return drawn;
}

static int td__series_pt(const void *s, size_t i, double *x, double *y)
{
    return td__point(s, i, x, y);
}

/* Draws s inside the area (the caller clipped to it); returns the number
 * of values drawn: a line broken at a missing value, and a marker per
 * epoch for a per-epoch series. */
static int td__draw_series(cairo_t *cr, const td_plot_map *m,
                           const td__series *s)
{
    int drawn = td_plot_line(cr, m, s->info->rgb, s->n, td__series_pt, s,
                             !s->per_epoch);
    double x, y;
    for (size_t i = 0; s->per_epoch && i < s->n; i++)
        if (td__point(s, i, &x, &y))
            td__marker(cr, s->info, td_plot_px(m, x), td_plot_py(m, y));
    return drawn;
}

static void td__legend_label(const td__series *s, int none, char *buf,
                             size_t cap)
{
    snprintf(buf, cap, "%s%s%s", s->info->label,
             s->per_epoch && !s->info->per_epoch ? " (epoch)" : "",
             none ? ": none" : "");
}

/* The legend, right-aligned in the panel's header between x_min and the
 * right edge (its font smaller when it would not fit, down to 7 px): a
 * swatch and a label per series, or "LABEL: none" in grey for a series
 * with no value. */
static void td__legend(cairo_t *cr, const td_plot_rect *whole, double x_min,
                       double y, const td__series *ss, const int *series,
                       int ns, const int *drawn)
{
    double xr = whole->x + whole->w - TD__RIGHT, need = 0, size = 11;
    char label[64];
    cairo_text_extents_t te;
    cairo_set_font_size(cr, size);
    for (int k = 0; k < ns; k++) {
        int none = drawn[series[k]] == 0;
        td__legend_label(&ss[series[k]], none, label, sizeof label);
        cairo_text_extents(cr, label, &te);
        need += te.x_advance + (none ? 0 : 22) + (k ? 14 : 0);
    }
    if (need > xr - x_min && need > 0)
        size = fmax(7, size * (xr - x_min) / need);
    cairo_set_font_size(cr, size);
    double gap = 14 * size / 11, sw = 22 * size / 11;
    for (int k = ns - 1; k >= 0; k--) {
        const td__series *s = &ss[series[k]];
        int none = drawn[series[k]] == 0;
        td__legend_label(s, none, label, sizeof label);
        cairo_text_extents(cr, label, &te);
        double w = te.x_advance + (none ? 0 : sw);
        double x = xr - w;
        if (!none) {
            td_plot_rgb(cr, s->info->rgb);
            cairo_set_line_width(cr, 2);
            cairo_move_to(cr, x, y - 4);
            cairo_line_to(cr, x + sw - 6, y - 4);
            cairo_stroke(cr);
            if (s->per_epoch)
                td__marker(cr, s->info, x + (sw - 6) / 2, y - 4);
        }
        td_plot_rgb(cr, none ? TD__FAINT : TD__TEXT);
        td_plot_text(cr, x + (none ? 0 : sw), y, 0, label);
        xr = x - gap;
    }
}

void td_plot_axes(cairo_t *cr, const td_plot_map *m, const char *xlabel)
{
    char buf[32];
    cairo_set_font_size(cr, 11);
    cairo_set_line_width(cr, 1);
    for (int k = 0, nt = td_plot_ticks(&m->y); k <= nt; k++) {
        double v = fmin(m->y.lo + k * m->y.step, m->y.hi);
        double py = floor(td_plot_py(m, v)) + 0.5;
        td_plot_rgb(cr, TD__GRID);
        cairo_move_to(cr, m->area.x, py);
        cairo_line_to(cr, m->area.x + m->area.w, py);
        cairo_stroke(cr);
        td_plot_tick_label(v, m->y.step, buf, sizeof buf);
        td_plot_rgb(cr, TD__TEXT);
        td_plot_text(cr, m->area.x - 6, py + 4, 2, buf);
    }
    for (int k = 0, nt = td_plot_ticks(&m->x); k <= nt; k++) {
        double v = fmin(m->x.lo + k * m->x.step, m->x.hi);
        /* a tick mark only: the vertical lines are the epochs' */
        double px = floor(td_plot_px(m, v)) + 0.5;
        td_plot_rgb(cr, TD__FRAME);
        cairo_move_to(cr, px, m->area.y + m->area.h);
        cairo_line_to(cr, px, m->area.y + m->area.h + 4);
        cairo_stroke(cr);
        td_plot_tick_label(v, m->x.step, buf, sizeof buf);
        td_plot_rgb(cr, TD__TEXT);
        td_plot_text(cr, px, m->area.y + m->area.h + 15, 1, buf);
    }
    td_plot_text(cr, m->area.x + m->area.w / 2.0, m->area.y + m->area.h + 31,
                 1, xlabel);
}

double td_plot_frame(cairo_t *cr, const td_plot_rect *whole,
                     const td_plot_rect *area, const char *title)
{
    td_plot_rgb(cr, TD__FRAME);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, area->x + 0.5, area->y + 0.5, area->w - 1,
                    area->h - 1);
    cairo_stroke(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, 13);
    td_plot_rgb(cr, TD__TEXT);
    double tx = whole->w < TD__NARROW ? whole->x + 12 : area->x;
    cairo_text_extents_t te;
    cairo_text_extents(cr, title, &te);
    td_plot_text(cr, tx, whole->y + 18, 0, title);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           CAIRO_FONT_WEIGHT_NORMAL);
    return tx + te.x_advance + 16;
}

/* One panel: grid lines and ticks, epoch boundaries, its series, frame, title
 * and legend. */
static void td__panel(cairo_t *cr, int width, int height, int panel,
                      const td__series *ss, const json_t *history,
                      const td_plot_axis *xa, td_plot_stats *st)
{
    td_plot_rect whole, area;
    td_plot_layout(width, height, panel, &whole, &area);
    /* nothing of a panel (a long tick label, a legend) reaches the next */
    cairo_save(cr);
    cairo_rectangle(cr, whole.x, whole.y, whole.w, whole.h);
    cairo_clip(cr);
    int series[TD_PLOT_NSERIES], ns = 0, cut = 0;
    double lo = INFINITY, hi = -INFINITY, x, y;
    size_t nv = 0, cap = 0;
    for (int s = 0; s < TD_PLOT_NSERIES; s++)
        if (td_plot_series[s].panel == panel)
            cap += ss[s].n;
    double *v = panel == TD_PLOT_LOSS ? malloc((cap ? cap : 1) * sizeof *v)
                                      : NULL;
    for (int s = 0; s < TD_PLOT_NSERIES; s++) {
        if (td_plot_series[s].panel != panel)
            continue;
        series[ns++] = s;
        for (size_t i = 0; i < ss[s].n; i++)
            if (td__point(&ss[s], i, &x, &y)) {
                lo = fmin(lo, y);
                hi = fmax(hi, y);
                if (v)
                    v[nv++] = y;
            }
    }
    if (v) /* one diverging epoch must not flatten the rest */
        hi = td_plot_loss_top(v, nv, hi);
    int any = lo <= hi;
    if (!any)
        lo = 0, hi = 1;
    if (panel == TD_PLOT_SPEED || panel == TD_PLOT_IDLE)
        lo = 0; /* rates read against zero */
    if (panel == TD_PLOT_IDLE && hi < 1)
        hi = 1;
    td_plot_map m = {area, *xa, td_plot_axis_of(lo, hi, 5)};
    if (panel == TD_PLOT_ACC || panel == TD_PLOT_IDLE) {
        m.y.lo = fmax(m.y.lo, 0);
        m.y.hi = fmin(m.y.hi, 100);
    }
    if (v)
        cut = td_plot_above(v, nv, m.y.hi);
    free(v);
    if (st)
        st->cut[panel] = cut;

    td_plot_axes(cr, &m, "step");

    /* epoch boundaries, then the series, inside the area only */
    cairo_save(cr);
    cairo_rectangle(cr, area.x, area.y, area.w, area.h);
    cairo_clip(cr);
    td_plot_rgb(cr, TD__EPOCH);
    for (size_t i = 0; i < json_array_size(history); i++) {
        double s = td_plot_num(json_array_get(history, i), "step");
        if (isnan(s))
            continue;
        double px = floor(td_plot_px(&m, s)) + 0.5;
        cairo_move_to(cr, px, area.y);
        cairo_line_to(cr, px, area.y + area.h);
    }
    cairo_stroke(cr);
    int drawn[TD_PLOT_NSERIES] = {0};
    for (int k = 0; k < ns; k++)
        drawn[series[k]] = td__draw_series(cr, &m, &ss[series[k]]);
    cairo_restore(cr);
    if (st)
        for (int k = 0; k < ns; k++)
            st->points[series[k]] = drawn[series[k]];
    if (!any) {
        td_plot_rgb(cr, TD__FAINT);
        cairo_set_font_size(cr, 12);
        td_plot_text(cr, area.x + area.w / 2.0, area.y + area.h / 2.0, 1,
                 "no values recorded");
    }

    td_plot_cut_note(cr, &area, cut);
    double tx = td_plot_frame(cr, &whole, &area, td__panel_title[panel]);
    if (whole.w < TD__NARROW) /* on a line of its own */
        td__legend(cr, &whole, whole.x + 12, whole.y + 36, ss, series, ns,
                   drawn);
    else
        td__legend(cr, &whole, tx, whole.y + 18, ss, series, ns, drawn);
    cairo_restore(cr);
}

/* "job 3 (fmnist): completed, 10 epochs, step 4690". */
static void td__title(const json_t *job, size_t epochs, double last_step,
                      char *buf, size_t cap)
{
    const char *name = json_string_value(json_object_get(job, "name"));
    const char *state = json_string_value(json_object_get(job, "state"));
    json_int_t id = json_integer_value(json_object_get(job, "id"));
    snprintf(buf, cap, "job %lld%s%s%s: %s%s%zu epoch%s finished, step %.0f",
             (long long)id, name ? " (" : "", name ? name : "",
             name ? ")" : "", state ? state : "", state ? ", " : "", epochs,
             epochs == 1 ? "" : "s", last_step);
}

int td_plot_curves(const json_t *job, const char *path, int width,
                   int height, td_plot_stats *stats, char *err,
                   size_t errcap)
{
    if (width < TD_PLOT_MIN_W || height < TD_PLOT_MIN_H ||
        width > TD_PLOT_MAX_SIDE || height > TD_PLOT_MAX_SIDE)
        return td_set_error(err, errcap, -EINVAL, "size %dx%d: from %dx%d "
                            "to %dx%d", width, height, TD_PLOT_MIN_W,
                            TD_PLOT_MIN_H, TD_PLOT_MAX_SIDE,
                            TD_PLOT_MAX_SIDE);
    const json_t *history = json_object_get(job, "history");
    const json_t *curve = json_object_get(job, "curve");
    size_t nh = json_array_size(history), nc = json_array_size(curve);
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->epochs = (int)nh;
        stats->windows = (int)nc;
    }
    if (nh + nc == 0) {
        /* "yet" of a job that has ended (failed at its start, cancelled
         * early) promised curves that will never come */
        const char *st = json_string_value(json_object_get(job, "state"));
        int ended = st && (strcmp(st, "completed") == 0 ||
                           strcmp(st, "failed") == 0 ||
                           strcmp(st, "cancelled") == 0);
        return td_set_error(err, errcap, -ENODATA, "job %lld has no "
                            "finished epoch or metrics window%s%s%s",
                            (long long)json_integer_value(
                                json_object_get(job, "id")),
                            ended ? ": it " : " yet", ended ? st : "",
                            ended ? " before its first" : "");
    }

    /* Throughput and idle come from the curve; a record without one
     * (older daemons) has them per epoch in its history. */
    td__series ss[TD_PLOT_NSERIES];
    double xmax = 0, x;
    for (int s = 0; s < TD_PLOT_NSERIES; s++) {
        const td_plot_series_info *in = &td_plot_series[s];
        int per_epoch = in->per_epoch ||
                        (nc == 0 && in->panel != TD_PLOT_LOSS);
        ss[s] = (td__series){in, per_epoch ? history : curve,
                             per_epoch ? nh : nc, per_epoch};
    }
    for (size_t i = 0; i < nh; i++)
        if (!isnan(x = td_plot_num(json_array_get(history, i), "step")))
            xmax = fmax(xmax, x);
    for (size_t i = 0; i < nc; i++)
        if (!isnan(x = td_plot_num(json_array_get(curve, i), "step")))
            xmax = fmax(xmax, x);
    td_plot_axis xa = td_plot_axis_of(0, xmax > 0 ? xmax : 1, 6);
    xa.lo = 0;

    cairo_t *cr = td_plot_begin(width, height, err, errcap);
    if (!cr)
        return -ENOMEM;

    char title[256];
    td__title(job, nh, xmax, title, sizeof title);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, 16);
    td_plot_rgb(cr, TD__TEXT);
    td_plot_text(cr, 14, 24, 0, title);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           CAIRO_FONT_WEIGHT_NORMAL);
    for (int p = 0; p < TD_PLOT_NPANELS; p++)
        td__panel(cr, width, height, p, ss, history, &xa, stats);

    return td_plot_finish(cr, path, err, errcap);
}

cairo_t *td_plot_begin(int width, int height, char *err, size_t errcap)
{
    cairo_surface_t *sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24,
                                                     width, height);
    if (cairo_surface_status(sf) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(sf);
        td_set_error(err, errcap, -ENOMEM, "cannot make a %dx%d "
                     "image", width, height);
        return NULL;
    }
    cairo_t *cr = cairo_create(sf);
    cairo_surface_destroy(sf); /* cr holds it */
    cairo_font_options_t *fo = cairo_font_options_create();
    cairo_font_options_set_antialias(fo, CAIRO_ANTIALIAS_GRAY);
    cairo_set_font_options(cr, fo);
    cairo_font_options_destroy(fo);
    td_plot_rgb(cr, 0xffffff);
    cairo_paint(cr);
    return cr;
}

int td_plot_finish(cairo_t *cr, const char *path, char *err, size_t errcap)
{
    cairo_surface_t *sf = cairo_surface_reference(cairo_get_target(cr));
    int rc = 0;
    cairo_status_t cs = cairo_status(cr);
    cairo_destroy(cr);
    if (cs != CAIRO_STATUS_SUCCESS) {
        rc = td_set_error(err, errcap, cs == CAIRO_STATUS_NO_MEMORY ?
                          -ENOMEM : -EIO, "drawing: %s",
                          cairo_status_to_string(cs));
    } else {
        errno = 0;
        cs = cairo_surface_write_to_png(sf, path);
        int e = errno;
        if (cs != CAIRO_STATUS_SUCCESS)
            rc = td_set_error(err, errcap, cs == CAIRO_STATUS_NO_MEMORY ?
                              -ENOMEM : -EIO, "%s: %s", path,
                              e ? strerror(e) : cairo_status_to_string(cs));
    }
    cairo_surface_destroy(sf);
    return rc;
}
