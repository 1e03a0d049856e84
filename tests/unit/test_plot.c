/* test_plot.c - trainctl plot's drawing (client/plot.c): a job record
 * built by hand with known history and curve is drawn, the PNG is read
 * back with lib/input/png.c, and each series is found by its exact colour
 * in its own panel and nowhere else; null values draw nothing (and not a
 * 0); a record with nothing to draw is an error that says so. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "plot.h"
#include "plot_image.h"
#include "tdtest.h"

enum { EPOCHS = 4, STEPS_PER_EPOCH = 100, WINDOW = 10 };

/* Which values of the record are null. */
enum {
    NULL_VAL = 1,        /* no validation set: val_loss, val_acc */
    NULL_IDLE = 2,       /* device_idle_ratio null everywhere */
    NULL_IDLE_SOME = 4,  /* every third window's device_idle_ratio null */
    NO_CURVE = 8,        /* an old record: history only */
};

static json_t *num_or_null(int is_null, double v)
{
    return is_null ? json_null() : json_real(v);
}

/* Job 3: EPOCHS finished epochs of STEPS_PER_EPOCH steps, a window every
 * WINDOW steps. */
static json_t *record(int flags)
{
    json_t *h = json_array(), *c = json_array();
    for (int e = 0; e < EPOCHS; e++)
        json_array_append_new(h, json_pack(
            "{s:i, s:i, s:f, s:f, s:o, s:o, s:f, s:f, s:f, s:o, s:s, s:f, "
            "s:f}",
            "epoch", e, "step", (e + 1) * STEPS_PER_EPOCH,
            "train_loss", 1.0 / (e + 1), "train_acc", 0.6 + 0.08 * e,
            "val_loss", num_or_null(flags & NULL_VAL, 1.1 / (e + 1)),
            "val_acc", num_or_null(flags & NULL_VAL, 0.55 + 0.08 * e),
            "lr", 0.01, "samples_per_s", 2500.0 + 10 * e,
            "input_wait_ratio", 0.02,
            "device_idle_ratio", num_or_null(flags & NULL_IDLE, 0.1),
            "verdict", "compute-bound", "train_s", 12.3, "eval_s", 1.1));
    for (int s = WINDOW; s <= EPOCHS * STEPS_PER_EPOCH; s += WINDOW) {
        int idle_null = (flags & NULL_IDLE) ||
                        ((flags & NULL_IDLE_SOME) && (s / WINDOW) % 3 == 0);
        json_array_append_new(c, json_pack(
            "{s:i, s:i, s:f, s:f, s:f, s:f, s:o, s:s}", "step", s,
            "epoch", (s - 1) / STEPS_PER_EPOCH,
            "train_loss", 1.5 - s / 400.0, "lr", 0.01,
            "samples_per_s", 2400.0 + (s % 50), "input_wait_ratio", 0.03,
            "device_idle_ratio",
            num_or_null(idle_null, 0.3 + 0.2 * sin(s / 50.0)),
            "verdict", "compute-bound"));
    }
    json_t *j = json_pack("{s:i, s:s, s:s}", "id", 3, "name", "fmnist",
                          "state", "running");
    json_object_set_new(j, "history", h);
    if (flags & NO_CURVE)
        json_decref(c);
    else
        json_object_set_new(j, "curve", c);
    return j;
}

static char tmp[64];
static char out[128];

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/td_plot_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    snprintf(out, sizeof out, "%s/curves.png", tmp);
}

static void teardown(void)
{
    unlink(out);
    rmdir(tmp);
}

/* Draws rec at w x h into `out` and reads it back as RGB. */
static void draw(json_t *rec, int w, int h, td_plot_stats *st,
                 plot_image *im)
{
    char err[256] = "";
    int rc = td_plot_curves(rec, out, w, h, st, err, sizeof err);
    ck_assert_msg(rc == 0, "td_plot_curves: %d %s", rc, err);
    plot_image_read(tmp, "curves.png", im);
}

static long count(const plot_image *im, td_plot_rect r, uint32_t rgb)
{
    return plot_image_count(im, r, rgb, NULL);
}

static long count_all(const plot_image *im, uint32_t rgb)
{
    return count(im, (td_plot_rect){0, 0, im->w, im->h}, rgb);
}

/* Series s is in its panel's data area, and in no other panel. */
static void assert_in_own_panel(const plot_image *im, int s)
{
    const td_plot_series_info *in = &td_plot_series[s];
    for (int p = 0; p < TD_PLOT_NPANELS; p++) {
        td_plot_rect whole, area;
        td_plot_layout(im->w, im->h, p, &whole, &area);
        long n = count(im, p == in->panel ? area : whole, in->rgb);
        if (p == in->panel)
            ck_assert_msg(n > 0, "%s: no pixel of #%06x in panel %d",
                          in->label, in->rgb, p);
        else
            ck_assert_msg(n == 0, "%s: %ld pixels of #%06x in panel %d",
                          in->label, n, in->rgb, p);
    }
}

START_TEST(test_every_series_in_its_panel)
{
    static const int sizes[][2] = {{1200, 900}, {640, 480}, {1600, 1000},
                                   {400, 300}};
    json_t *rec = record(0);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        td_plot_stats st;
        plot_image im;
        draw(rec, sizes[k][0], sizes[k][1], &st, &im);
        ck_assert_int_eq(im.w, sizes[k][0]);
        ck_assert_int_eq(im.h, sizes[k][1]);
        ck_assert_int_eq(st.epochs, EPOCHS);
        ck_assert_int_eq(st.windows, EPOCHS * STEPS_PER_EPOCH / WINDOW);
        for (int s = 0; s < TD_PLOT_NSERIES; s++) {
            assert_in_own_panel(&im, s);
            ck_assert_int_eq(st.points[s], td_plot_series[s].per_epoch
                                               ? st.epochs : st.windows);
        }
        plot_image_free(&im);
    }
    json_decref(rec);
}
END_TEST

/* Rows of the series' colour in the loss panel's area: the line's
 * vertical extent in pixels (0: none). */
static int loss_rows(const plot_image *im, uint32_t rgb)
{
    td_plot_rect whole, area;
    td_plot_layout(im->w, im->h, TD_PLOT_LOSS, &whole, &area);
    int top = -1, bottom = -1;
    for (int y = area.y; y < area.y + area.h; y++)
        if (count(im, (td_plot_rect){area.x, y, area.w, 1}, rgb) > 0) {
            if (top < 0)
                top = y;
            bottom = y;
        }
    return top < 0 ? 0 : bottom - top + 1;
}

/* One diverging epoch (val loss 25.9 where the rest is 0.3-1.5) flattened
 * the loss panel's every other curve into a few pixels: its axis ends
 * near the other values now, the spike runs off the top, and the panel
 * says a value is above it. */
START_TEST(test_loss_spike_does_not_flatten_the_rest)
{
    json_t *rec = record(0);
    td_plot_stats st;
    plot_image im;
    draw(rec, 1200, 900, &st, &im);
    ck_assert_int_eq(st.cut[TD_PLOT_LOSS], 0);
    int normal = loss_rows(&im, td_plot_series[TD_PLOT_S_LOSS_WINDOW].rgb);
    plot_image_free(&im);
    json_object_set_new(json_array_get(json_object_get(rec, "history"), 0),
                        "val_loss", json_real(25.9));
    draw(rec, 1200, 900, &st, &im);
    ck_assert_int_eq(st.cut[TD_PLOT_LOSS], 1);
    for (int p = TD_PLOT_ACC; p < TD_PLOT_NPANELS; p++)
        ck_assert_int_eq(st.cut[p], 0);
    int spiked = loss_rows(&im, td_plot_series[TD_PLOT_S_LOSS_WINDOW].rgb);
    td_plot_rect whole, area;
    td_plot_layout(im.w, im.h, TD_PLOT_LOSS, &whole, &area);
    /* the window losses (1.5 -> 0.5) keep most of the panel's height:
     * with the axis to 25.9 they took 4 % of it */
    ck_assert_msg(spiked > area.h / 3 && spiked * 2 > normal,
                  "window loss over %d of %d rows (%d without the spike)",
                  spiked, area.h, normal);
    /* the val loss line reaches the top edge, where the spike is */
    ck_assert_int_gt(count(&im, (td_plot_rect){area.x, area.y, area.w, 3},
                           td_plot_series[TD_PLOT_S_LOSS_VAL].rgb), 0);
    plot_image_free(&im);
    json_decref(rec);
}
END_TEST

START_TEST(test_colours_are_distinct_and_panels_apart)
{
    for (int a = 0; a < TD_PLOT_NSERIES; a++)
        for (int b = a + 1; b < TD_PLOT_NSERIES; b++)
            ck_assert_uint_ne(td_plot_series[a].rgb, td_plot_series[b].rgb);
    td_plot_rect w[TD_PLOT_NPANELS], a[TD_PLOT_NPANELS];
    for (int p = 0; p < TD_PLOT_NPANELS; p++) {
        td_plot_layout(1200, 900, p, &w[p], &a[p]);
        ck_assert(a[p].x > w[p].x && a[p].y > w[p].y);
        ck_assert(a[p].x + a[p].w < w[p].x + w[p].w);
        ck_assert(a[p].y + a[p].h < w[p].y + w[p].h);
        ck_assert(w[p].x + w[p].w <= 1200 && w[p].y + w[p].h <= 900);
        for (int q = 0; q < p; q++) /* no overlap */
            ck_assert(w[p].x >= w[q].x + w[q].w || w[q].x >= w[p].x + w[p].w
                      || w[p].y >= w[q].y + w[q].h ||
                      w[q].y >= w[p].y + w[p].h);
    }
}
END_TEST

START_TEST(test_null_val_draws_no_val)
{
    json_t *rec = record(NULL_VAL);
    td_plot_stats st;
    plot_image im;
    draw(rec, 1200, 900, &st, &im);
    /* Not in the plot and not in the legend either. */
    ck_assert_int_eq(count_all(&im, td_plot_series[TD_PLOT_S_LOSS_VAL].rgb),
                     0);
    ck_assert_int_eq(count_all(&im, td_plot_series[TD_PLOT_S_ACC_VAL].rgb),
                     0);
    ck_assert_int_eq(st.points[TD_PLOT_S_LOSS_VAL], 0);
    ck_assert_int_eq(st.points[TD_PLOT_S_ACC_VAL], 0);
    assert_in_own_panel(&im, TD_PLOT_S_LOSS_TRAIN);
    assert_in_own_panel(&im, TD_PLOT_S_LOSS_WINDOW);
    assert_in_own_panel(&im, TD_PLOT_S_ACC_TRAIN);
    plot_image_free(&im);
    json_decref(rec);
}
END_TEST

START_TEST(test_null_idle_is_skipped_not_zero)
{
    /* All null: nothing drawn. */
    json_t *rec = record(NULL_IDLE);
    td_plot_stats st;
    plot_image im;
    uint32_t idle = td_plot_series[TD_PLOT_S_DEVICE_IDLE].rgb;
    draw(rec, 1200, 900, &st, &im);
    ck_assert_int_eq(count_all(&im, idle), 0);
    ck_assert_int_eq(st.points[TD_PLOT_S_DEVICE_IDLE], 0);
    assert_in_own_panel(&im, TD_PLOT_S_INPUT_WAIT);
    plot_image_free(&im);
    json_decref(rec);

    /* Some null: the others drawn, the gaps not as 0 %.  The values are
     * 10..50 %, so nothing of the series may be near the zero line at
     * the bottom of the area. */
    rec = record(NULL_IDLE_SOME);
    draw(rec, 1200, 900, &st, &im);
    td_plot_rect area;
    td_plot_layout(1200, 900, TD_PLOT_IDLE, NULL, &area);
    ck_assert_int_gt(count(&im, area, idle), 0);
    td_plot_rect bottom = {area.x, area.y + area.h - 20, area.w, 20};
    ck_assert_int_eq(count(&im, bottom, idle), 0);
    ck_assert_int_eq(st.points[TD_PLOT_S_DEVICE_IDLE],
                     st.windows - st.windows / 3);
    plot_image_free(&im);
    json_decref(rec);
}
END_TEST

START_TEST(test_history_only_record)
{
    /* An old record without a curve: throughput and idle per epoch. */
    json_t *rec = record(NO_CURVE);
    td_plot_stats st;
    plot_image im;
    draw(rec, 1200, 900, &st, &im);
    ck_assert_int_eq(st.windows, 0);
    ck_assert_int_eq(st.points[TD_PLOT_S_LOSS_WINDOW], 0);
    ck_assert_int_eq(count_all(&im,
                               td_plot_series[TD_PLOT_S_LOSS_WINDOW].rgb), 0);
    ck_assert_int_eq(st.points[TD_PLOT_S_SPEED], EPOCHS);
    assert_in_own_panel(&im, TD_PLOT_S_SPEED);
    assert_in_own_panel(&im, TD_PLOT_S_DEVICE_IDLE);
    assert_in_own_panel(&im, TD_PLOT_S_INPUT_WAIT);
    assert_in_own_panel(&im, TD_PLOT_S_LOSS_VAL);
    plot_image_free(&im);
    json_decref(rec);
}
END_TEST

START_TEST(test_degenerate_values)
{
    /* One window only; a flat loss; samples/s too close together for a
     * tick step; a step of 0.  Each is drawn (a dot when alone). */
    json_t *rec = json_pack(
        "{s:i, s:[{s:i, s:f, s:f, s:f, s:f}, {s:i, s:f, s:f, s:f, s:n}]}",
        "id", 3, "curve",
        "step", 0, "train_loss", 0.5, "samples_per_s", 1e9,
        "input_wait_ratio", 0.0, "device_idle_ratio", 1.0,
        "step", 7, "train_loss", 0.5, "samples_per_s", 1e9 + 1e-7,
        "input_wait_ratio", 0.0, "device_idle_ratio");
    td_plot_stats st;
    plot_image im;
    draw(rec, 400, 300, &st, &im);
    ck_assert_int_eq(st.points[TD_PLOT_S_LOSS_WINDOW], 2);
    ck_assert_int_eq(st.points[TD_PLOT_S_DEVICE_IDLE], 1);
    assert_in_own_panel(&im, TD_PLOT_S_LOSS_WINDOW);
    assert_in_own_panel(&im, TD_PLOT_S_SPEED);
    assert_in_own_panel(&im, TD_PLOT_S_DEVICE_IDLE);
    assert_in_own_panel(&im, TD_PLOT_S_INPUT_WAIT);
    plot_image_free(&im);
    json_decref(rec);
}
END_TEST

START_TEST(test_no_points_is_an_error)
{
    json_t *recs[3] = {
        json_pack("{s:i, s:s}", "id", 3, "state", "running"),
        json_pack("{s:i, s:[], s:[]}", "id", 3, "history", "curve"),
        json_pack("{s:i, s:n, s:s}", "id", 3, "history", "curve", "x"),
    };
    for (int i = 0; i < 3; i++) {
        char err[256] = "";
        td_plot_stats st;
        ck_assert_int_eq(td_plot_curves(recs[i], out, 1200, 900, &st, err,
                                        sizeof err), -ENODATA);
        ck_assert_str_eq(err, "job 3 has no finished epoch or metrics "
                              "window yet");
        struct stat sb;
        ck_assert_int_ne(stat(out, &sb), 0); /* nothing written */
        json_decref(recs[i]);
    }
    /* an ended job will never have any: no "yet" (it said so of a job
     * that failed at its start) */
    json_t *failed = json_pack("{s:i, s:s}", "id", 4, "state", "failed");
    char err[256] = "";
    ck_assert_int_eq(td_plot_curves(failed, out, 1200, 900, NULL, err,
                                    sizeof err), -ENODATA);
    ck_assert_str_eq(err, "job 4 has no finished epoch or metrics window: "
                          "it failed before its first");
    json_decref(failed);
}
END_TEST

START_TEST(test_bad_size_and_unwritable_path)
{
    json_t *rec = record(0);
    char err[256] = "";
    ck_assert_int_eq(td_plot_curves(rec, out, 100, 900, NULL, err,
                                    sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "100x900"));
    char bad[160];
    snprintf(bad, sizeof bad, "%s/no/such/dir.png", tmp);
    ck_assert_int_eq(td_plot_curves(rec, bad, 1200, 900, NULL, err,
                                    sizeof err), -EIO);
    ck_assert_msg(strstr(err, bad) && strstr(err, "No such file"), "%s",
                  err);
    json_decref(rec);
}
END_TEST

static Suite *plot_suite(void)
{
    Suite *s = suite_create("plot");
    TCase *tc = tcase_create("plot");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_every_series_in_its_panel);
    tcase_add_test(tc, test_colours_are_distinct_and_panels_apart);
    tcase_add_test(tc, test_loss_spike_does_not_flatten_the_rest);
    tcase_add_test(tc, test_null_val_draws_no_val);
    tcase_add_test(tc, test_null_idle_is_skipped_not_zero);
    tcase_add_test(tc, test_history_only_record);
    tcase_add_test(tc, test_degenerate_values);
    tcase_add_test(tc, test_no_points_is_an_error);
    tcase_add_test(tc, test_bad_size_and_unwritable_path);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(plot_suite)
