/* test_plot_compare.c - trainctl plot with several jobs (client/
 * plot_compare.c): job records built by hand are drawn, the PNG is read
 * back with lib/input/png.c and each job is found by its exact colour in
 * the panels where it has values and in no panel where it has none; jobs
 * with other steps per epoch line up on the epoch axis; a job with
 * nothing yet is left out, all jobs with nothing is an error. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "plot.h"
#include "plot_image.h"
#include "tdtest.h"

enum { EPOCHS = 4, WINDOW = 10 };

/* Job id: EPOCHS finished epochs of spe steps, a window every WINDOW
 * steps; no validation set with no_val; history only with no_curve. */
static json_t *record(int id, int spe, int no_val, int no_curve)
{
    json_t *h = json_array(), *c = json_array();
    for (int e = 0; e < EPOCHS; e++)
        json_array_append_new(h, json_pack(
            "{s:i, s:i, s:f, s:f, s:o, s:o, s:f}", "epoch", e, "step",
            (e + 1) * spe, "train_loss", 1.0 / (e + 1) + id * 0.01,
            "train_acc", 0.6 + 0.08 * e,
            "val_loss",
            no_val ? json_null() : json_real(1.1 / (e + 1) + id * 0.05),
            "val_acc",
            no_val ? json_null() : json_real(0.5 + 0.08 * e - id * 0.02),
            "samples_per_s", 2500.0 + 100 * id));
    for (int s = WINDOW; s <= EPOCHS * spe; s += WINDOW)
        json_array_append_new(c, json_pack(
            "{s:i, s:i, s:f, s:f}", "step", s, "epoch", (s - 1) / spe,
            "train_loss", 1.5 - s / (4.0 * spe) + id * 0.01,
            "samples_per_s", 2400.0 + 100 * id + (s % 50)));
    json_t *j = json_pack("{s:i, s:s, s:s, s:i, s:i}", "id", id, "name",
                          "run", "state", "completed", "steps_total",
                          EPOCHS * spe, "epochs_total", EPOCHS);
    json_object_set_new(j, "history", h);
    if (no_curve)
        json_decref(c);
    else
        json_object_set_new(j, "curve", c);
    return j;
}

static char tmp[64], out[128];

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/td_plotc_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    snprintf(out, sizeof out, "%s/cmp.png", tmp);
}

static void teardown(void)
{
    unlink(out);
    rmdir(tmp);
}

static void draw(json_t **recs, int n, td_plot_cmp_stats *st,
                 plot_image *im)
{
    char err[256] = "";
    int rc = td_plot_compare((const json_t *const *)recs, n, out, 1200, 900,
                             st, err, sizeof err);
    ck_assert_msg(rc == 0, "td_plot_compare: %d %s", rc, err);
    plot_image_read(tmp, "cmp.png", im);
}

START_TEST(test_each_job_in_its_colour)
{
    /* job 3: 100 steps an epoch; job 4: 50, no validation set; job 5:
     * history only */
    json_t *recs[3] = {record(3, 100, 0, 0), record(4, 50, 1, 0),
                       record(5, 100, 0, 1)};
    td_plot_cmp_stats st;
    plot_image im;
    draw(recs, 3, &st, &im);
    for (int j = 0; j < 3; j++)
        ck_assert_int_eq(st.epochs[j], EPOCHS);
    ck_assert_int_eq(st.windows[0], EPOCHS * 100 / WINDOW);
    ck_assert_int_eq(st.windows[1], EPOCHS * 50 / WINDOW);
    ck_assert_int_eq(st.windows[2], 0);
    /* what each job has is drawn, what it lacks is not */
    int want[3][TD_PLOT_C_NPANELS] = {
        {40, EPOCHS, EPOCHS, 40}, {20, 0, 0, 20},
        {EPOCHS, EPOCHS, EPOCHS, EPOCHS}}; /* job 5: per epoch */
    for (int j = 0; j < 3; j++)
        for (int p = 0; p < TD_PLOT_C_NPANELS; p++) {
            ck_assert_int_eq(st.points[j][p], want[j][p]);
            td_plot_rect whole, area;
            td_plot_layout(im.w, im.h, p, &whole, &area);
            long n = plot_image_count(&im, area, td_plot_job_rgb[j], NULL);
            ck_assert_msg(want[j][p] ? n > 0 : n == 0,
                          "job %d panel %d: %ld pixels", j, p, n);
        }
    /* jobs 3 and 4 end at epoch 4 alike, though at steps 400 and 200 */
    td_plot_rect whole, area;
    td_plot_layout(im.w, im.h, TD_PLOT_C_TRAIN_LOSS, &whole, &area);
    int x3, x4;
    plot_image_count(&im, area, td_plot_job_rgb[0], &x3);
    plot_image_count(&im, area, td_plot_job_rgb[1], &x4);
    ck_assert_msg(abs(x3 - x4) <= 3, "ends at x %d and %d", x3, x4);
    /* each job's swatch in the title band */
    for (int j = 0; j < 3; j++)
        ck_assert_int_gt(plot_image_count(&im, (td_plot_rect){0, 0, im.w, 36},
                               td_plot_job_rgb[j], NULL), 0);
    plot_image_free(&im);
    for (int j = 0; j < 3; j++)
        json_decref(recs[j]);
}
END_TEST

/* One run that diverged (val loss 40 at its first epoch) no longer
 * flattens the others' val loss: the axis ends near their values and the
 * panel counts the one above it. */
START_TEST(test_one_diverged_run_does_not_flatten_the_others)
{
    json_t *recs[2] = {record(3, 100, 0, 0), record(4, 100, 0, 0)};
    json_object_set_new(json_array_get(json_object_get(recs[1], "history"),
                                       0), "val_loss", json_real(40));
    td_plot_cmp_stats st;
    plot_image im;
    draw(recs, 2, &st, &im);
    ck_assert_int_eq(st.cut[TD_PLOT_C_VAL_LOSS], 1);
    ck_assert_int_eq(st.cut[TD_PLOT_C_TRAIN_LOSS], 0);
    td_plot_rect whole, area;
    td_plot_layout(im.w, im.h, TD_PLOT_C_VAL_LOSS, &whole, &area);
    int top = -1, bottom = -1; /* job 3's val loss: 1.1 down to 0.275 */
    for (int y = area.y; y < area.y + area.h; y++)
        if (plot_image_count(&im, (td_plot_rect){area.x, y, area.w, 1},
                             td_plot_job_rgb[0], NULL) > 0) {
            if (top < 0)
                top = y;
            bottom = y;
        }
    ck_assert_msg(top >= 0 && bottom - top > area.h / 3,
                  "job 3's val loss over rows %d..%d of %d", top, bottom,
                  area.h);
    plot_image_free(&im);
    json_decref(recs[0]);
    json_decref(recs[1]);
}
END_TEST

START_TEST(test_job_colours_distinct)
{
    for (int a = 0; a < TD_PLOT_MAX_JOBS; a++)
        for (int b = a + 1; b < TD_PLOT_MAX_JOBS; b++)
            ck_assert_uint_ne(td_plot_job_rgb[a], td_plot_job_rgb[b]);
}
END_TEST

START_TEST(test_nothing_to_draw)
{
    json_t *empty = json_pack("{s:i, s:[], s:[]}", "id", 7, "history",
                              "curve");
    json_t *full = record(3, 100, 0, 0);
    /* one empty job beside one with values: drawn, the empty one left out */
    json_t *two[2] = {full, empty};
    td_plot_cmp_stats st;
    plot_image im;
    draw(two, 2, &st, &im);
    for (int p = 0; p < TD_PLOT_C_NPANELS; p++)
        ck_assert_int_eq(st.points[1][p], 0);
    plot_image_free(&im);
    unlink(out);
    char err[256] = "";
    json_t *none[2] = {empty, empty};
    ck_assert_int_eq(td_plot_compare((const json_t *const *)none, 2, out,
                                     1200, 900, NULL, err, sizeof err),
                     -ENODATA);
    ck_assert_str_eq(err, "no job has a finished epoch or metrics window "
                          "yet");
    struct stat sb;
    ck_assert_int_ne(stat(out, &sb), 0);
    json_t *many[TD_PLOT_MAX_JOBS + 1];
    for (int j = 0; j <= TD_PLOT_MAX_JOBS; j++)
        many[j] = full;
    ck_assert_int_eq(td_plot_compare((const json_t *const *)many,
                                     TD_PLOT_MAX_JOBS + 1, out, 1200, 900,
                                     NULL, err, sizeof err), -EINVAL);
    json_decref(empty);
    json_decref(full);
}
END_TEST

static Suite *plot_compare_suite(void)
{
    Suite *s = suite_create("plot_compare");
    TCase *tc = tcase_create("plot_compare");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_each_job_in_its_colour);
    tcase_add_test(tc, test_job_colours_distinct);
    tcase_add_test(tc, test_one_diverged_run_does_not_flatten_the_others);
    tcase_add_test(tc, test_nothing_to_draw);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(plot_compare_suite)
