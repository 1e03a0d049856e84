/* plot_compare.c - several jobs' learning curves in one PNG (plot.h,
 * td_plot_compare): a colour per job, four panels against the epoch. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "plot.h"
#include "plot_int.h"

/* tab10, as plot.c's series; here a colour is a job. */
const uint32_t td_plot_job_rgb[TD_PLOT_MAX_JOBS] = {
    0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
    0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};

/* What each panel draws: the key, from the curve (windows, a line) or the
 * history (epochs, a line with markers), and its scale. */
static const struct {
    const char *title, *key;
    int per_epoch;
    double scale;
} td__cmp[TD_PLOT_C_NPANELS] = {
    [TD_PLOT_C_TRAIN_LOSS] = {"train loss (windows)", "train_loss", 0, 1},
    [TD_PLOT_C_VAL_LOSS] = {"val loss", "val_loss", 1, 1},
    [TD_PLOT_C_VAL_ACC] = {"val accuracy (%)", "val_acc", 1, 100},
    [TD_PLOT_C_SPEED] = {"throughput (samples/s)", "samples_per_s", 0, 1},
};

const char *td_plot_compare_key(int panel) { return td__cmp[panel].key; }

/* One job's series of panel p. */
typedef struct td__line {
    const json_t *src; /* history or curve */
    size_t n;
    int per_epoch;
    double spe;        /* the job's steps per epoch (0: unknown) */
    const char *key;
    double scale;
} td__line;

/* Steps per epoch of job: steps_total / epochs_total, else from its first
 * finished epoch; 0 when neither is known. */
static double td__spe(const json_t *job)
{
    double st = td_plot_num(job, "steps_total");
    double ep = td_plot_num(job, "epochs_total");
    if (st > 0 && ep > 0)
        return st / ep;
    const json_t *h0 = json_array_get(json_object_get(job, "history"), 0);
    double s = td_plot_num(h0, "step"), e = td_plot_num(h0, "epoch");
    return s > 0 && e >= 0 ? s / (e + 1) : 0;
}

static td__line td__line_of(const json_t *job, int p)
{
    const json_t *h = json_object_get(job, "history");
    const json_t *c = json_object_get(job, "curve");
    /* A record without a curve (older daemons) has per-epoch values of
     * the same names in its history. */
    int per_epoch = td__cmp[p].per_epoch || json_array_size(c) == 0;
    return (td__line){per_epoch ? h : c, json_array_size(per_epoch ? h : c),
                      per_epoch, td__spe(job), td__cmp[p].key,
                      td__cmp[p].scale};
}

/* Point i of l in epochs (a finished epoch k sits at k + 1); 0 when it
 * cannot be placed or has no value. */
static int td__pt(const td__line *l, size_t i, double *x, double *y)
{
    const json_t *e = json_array_get(l->src, i);
    if (l->per_epoch) {
        *x = td_plot_num(e, "epoch") + 1;
    } else {
        double s = td_plot_num(e, "step");
        *x = l->spe > 0 ? s / l->spe : NAN;
    }
    *y = td_plot_num(e, l->key) * l->scale;
    return !isnan(*x) && !isnan(*y);
}

static int td__line_pt(const void *l, size_t i, double *x, double *y)
{
    return td__pt(l, i, x, y);
}

/* l's line in rgb, a dot per epoch for a per-epoch series. */
static int td__draw(cairo_t *cr, const td_plot_map *m, const td__line *l,
                    uint32_t rgb)
{
    int drawn = td_plot_line(cr, m, rgb, l->n, td__line_pt, l,
                             !l->per_epoch);
    double x, y;
    for (size_t i = 0; l->per_epoch && i < l->n; i++)
        if (td__pt(l, i, &x, &y)) {
            cairo_arc(cr, td_plot_px(m, x), td_plot_py(m, y), 3.5, 0,
                      2 * M_PI);
            cairo_fill(cr);
        }
    return drawn;
}

static void td__panel(cairo_t *cr, int width, int height, int p,
                      const json_t *const *jobs, int n, double xmax,
                      td_plot_cmp_stats *st)
{
    td_plot_rect whole, area;
    td_plot_layout(width, height, p, &whole, &area);
    cairo_save(cr);
    cairo_rectangle(cr, whole.x, whole.y, whole.w, whole.h);
    cairo_clip(cr);
    double lo = INFINITY, hi = -INFINITY, x, y;
    int loss = p == TD_PLOT_C_TRAIN_LOSS || p == TD_PLOT_C_VAL_LOSS, cut = 0;
    size_t nv = 0, cap = 0;
    for (int j = 0; j < n; j++)
        cap += td__line_of(jobs[j], p).n;
    double *v = loss ? malloc((cap ? cap : 1) * sizeof *v) : NULL;
    for (int j = 0; j < n; j++) {
        td__line l = td__line_of(jobs[j], p);
        for (size_t i = 0; i < l.n; i++)
            if (td__pt(&l, i, &x, &y)) {
                lo = fmin(lo, y);
                hi = fmax(hi, y);
                if (v)
                    v[nv++] = y;
            }
    }
    if (v) /* one diverging run must not flatten the others */
        hi = td_plot_loss_top(v, nv, hi);
    int any = lo <= hi;
    if (!any)
        lo = 0, hi = 1;
    if (p == TD_PLOT_C_SPEED)
        lo = 0;
    td_plot_axis xa = td_plot_axis_of(0, xmax, 6);
    xa.lo = 0;
    td_plot_map m = {area, xa, td_plot_axis_of(lo, hi, 5)};
    if (p == TD_PLOT_C_VAL_ACC) {
        m.y.lo = fmax(m.y.lo, 0);
        m.y.hi = fmin(m.y.hi, 100);
    }
    if (v)
        cut = td_plot_above(v, nv, m.y.hi);
    free(v);
    if (st)
        st->cut[p] = cut;
    td_plot_axes(cr, &m, "epoch");
    cairo_save(cr);
    cairo_rectangle(cr, area.x, area.y, area.w, area.h);
    cairo_clip(cr);
    td_plot_rgb(cr, TD__EPOCH);
    for (int k = 1; k <= (int)floor(m.x.hi) && k <= 1000; k++) {
        double px = floor(td_plot_px(&m, k)) + 0.5;
        cairo_move_to(cr, px, area.y);
        cairo_line_to(cr, px, area.y + area.h);
    }
    cairo_stroke(cr);
    for (int j = 0; j < n; j++) {
        td__line l = td__line_of(jobs[j], p);
        int d = td__draw(cr, &m, &l, td_plot_job_rgb[j]);
        if (st)
            st->points[j][p] = d;
    }
    cairo_restore(cr);
    if (!any) {
        td_plot_rgb(cr, TD__FAINT);
        cairo_set_font_size(cr, 12);
        td_plot_text(cr, area.x + area.w / 2.0, area.y + area.h / 2.0, 1,
                     "no values recorded");
    }
    td_plot_cut_note(cr, &area, cut);
    td_plot_frame(cr, &whole, &area, td__cmp[p].title);
    cairo_restore(cr);
}

/* "3 (fmnist)", the name cut at 24 bytes. */
static void td__job_label(const json_t *job, char *buf, size_t cap)
{
    const char *name = json_string_value(json_object_get(job, "name"));
    snprintf(buf, cap, "%lld%s%.24s%s",
             (long long)json_integer_value(json_object_get(job, "id")),
             name ? " (" : "", name ? name : "", name ? ")" : "");
}

/* The title band: "jobs" and a swatch and label per job, the font
 * smaller when they would not fit (down to 7 px). */
static void td__title(cairo_t *cr, int width, const json_t *const *jobs,
                      int n)
{
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, 16);
    td_plot_rgb(cr, TD__TEXT);
    cairo_text_extents_t te;
    cairo_text_extents(cr, "jobs", &te);
    td_plot_text(cr, 14, 24, 0, "jobs");
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           CAIRO_FONT_WEIGHT_NORMAL);
    double x0 = 14 + te.x_advance + 14, room = width - TD__RIGHT - x0;
    double size = 13, need = 0;
    char label[96];
    cairo_set_font_size(cr, size);
    for (int j = 0; j < n; j++) {
        td__job_label(jobs[j], label, sizeof label);
        cairo_text_extents(cr, label, &te);
        need += 22 + te.x_advance + 14;
    }
    if (need > room && need > 0)
        size = fmax(7, size * room / need);
    cairo_set_font_size(cr, size);
    double x = x0, sw = 22 * size / 13;
    for (int j = 0; j < n; j++) {
        td__job_label(jobs[j], label, sizeof label);
        td_plot_rgb(cr, td_plot_job_rgb[j]);
        cairo_set_line_width(cr, 3);
        cairo_move_to(cr, x, 19);
        cairo_line_to(cr, x + sw - 6, 19);
        cairo_stroke(cr);
        td_plot_rgb(cr, TD__TEXT);
        cairo_text_extents(cr, label, &te);
        td_plot_text(cr, x + sw, 23, 0, label);
        x += sw + te.x_advance + 14 * size / 13;
    }
}

int td_plot_compare(const json_t *const *jobs, int n, const char *path,
                    int width, int height, td_plot_cmp_stats *st, char *err,
                    size_t errcap)
{
    if (n < 1 || n > TD_PLOT_MAX_JOBS)
        return td_set_error(err, errcap, -EINVAL, "%d jobs: 1 to %d", n,
                            TD_PLOT_MAX_JOBS);
    if (width < TD_PLOT_MIN_W || height < TD_PLOT_MIN_H ||
        width > TD_PLOT_MAX_SIDE || height > TD_PLOT_MAX_SIDE)
        return td_set_error(err, errcap, -EINVAL, "size %dx%d: from %dx%d "
                            "to %dx%d", width, height, TD_PLOT_MIN_W,
                            TD_PLOT_MIN_H, TD_PLOT_MAX_SIDE,
                            TD_PLOT_MAX_SIDE);
    if (st)
        memset(st, 0, sizeof *st);
    double xmax = 0, x, y;
    int any = 0;
    for (int j = 0; j < n; j++) {
        size_t nh = json_array_size(json_object_get(jobs[j], "history"));
        size_t nc = json_array_size(json_object_get(jobs[j], "curve"));
        if (st) {
            st->epochs[j] = (int)nh;
            st->windows[j] = (int)nc;
        }
        any |= nh + nc > 0;
        for (int p = 0; p < TD_PLOT_C_NPANELS; p++) {
            td__line l = td__line_of(jobs[j], p);
            for (size_t i = 0; i < l.n; i++) {
                /* x whether or not the value is there */
                double v = td_plot_num(json_array_get(l.src, i), "step");
                if (td__pt(&l, i, &x, &y) || (!l.per_epoch && l.spe > 0 &&
                                              !isnan(x = v / l.spe)))
                    xmax = fmax(xmax, x);
            }
        }
    }
    if (!any)
        return td_set_error(err, errcap, -ENODATA, "no job has a finished "
                            "epoch or metrics window yet");
    cairo_t *cr = td_plot_begin(width, height, err, errcap);
    if (!cr)
        return -ENOMEM;
    td__title(cr, width, jobs, n);
    for (int p = 0; p < TD_PLOT_C_NPANELS; p++)
        td__panel(cr, width, height, p, jobs, n, xmax > 0 ? xmax : 1, st);
    return td_plot_finish(cr, path, err, errcap);
}
