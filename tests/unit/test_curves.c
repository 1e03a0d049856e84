/* test_curves.c - a job's learning curves (daemon/curves.c): the fields
 * an epoch or a window event leaves in the record, an epoch or window
 * reported again after a resume replacing the first report, the window
 * series thinned to TD_CURVE_MAX while still covering the whole run, and
 * the record round trip. */
#include <string.h>

#include "curves.h"
#include "tdtest.h"

static json_t *epoch_ev(int e, double val_acc)
{
    json_t *o = json_pack("{s:i, s:i, s:f, s:f, s:f, s:s, s:i}", "epoch", e,
                          "step", 10 * (e + 1), "train_loss", 1.0 / (e + 1),
                          "train_acc", 0.5, "lr", 0.1, "verdict",
                          "compute-bound", "epochs_total", 9);
    json_object_set_new(o, "val_acc", val_acc < 0 ? json_null()
                                                  : json_real(val_acc));
    return o;
}

static json_t *window_ev(int step)
{
    return json_pack("{s:i, s:i, s:f, s:f, s:n, s:f, s:i}", "step", step,
                     "epoch", step / 100, "train_loss", 2.0 - step * 1e-4,
                     "samples_per_s", 1000.0 + step, "device_idle_ratio",
                     "lr", 0.1, "workers", 3);
}

START_TEST(test_epochs_kept_with_their_fields)
{
    td_curves c;
    ck_assert_int_eq(td_curves_init(&c), 0);
    for (int e = 0; e < 3; e++) {
        json_t *ev = epoch_ev(e, e == 1 ? -1 : 0.8);
        ck_assert_int_eq(td_curves_epoch(&c, ev), 0);
        json_decref(ev);
    }
    ck_assert_int_eq(json_array_size(c.history), 3);
    json_t *h1 = json_array_get(c.history, 1);
    ck_assert_int_eq(json_integer_value(json_object_get(h1, "epoch")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(h1, "step")), 20);
    ck_assert(json_is_null(json_object_get(h1, "val_acc"))); /* kept null */
    ck_assert_double_eq(json_real_value(json_object_get(h1, "lr")), 0.1);
    ck_assert_str_eq(json_string_value(json_object_get(h1, "verdict")),
                     "compute-bound");
    ck_assert_ptr_null(json_object_get(h1, "epochs_total")); /* not a curve */
    /* Resumed from a checkpoint inside epoch 2 (0-based 1): epoch 1 is
     * reported again and replaces the old epochs 1 and 2. */
    json_t *again = epoch_ev(1, 0.9);
    ck_assert_int_eq(td_curves_epoch(&c, again), 0);
    json_decref(again);
    ck_assert_int_eq(json_array_size(c.history), 2);
    ck_assert_double_eq(json_real_value(json_object_get(
                            json_array_get(c.history, 1), "val_acc")), 0.9);
    td_curves_free(&c);
}
END_TEST

START_TEST(test_windows_thinned_cover_the_run)
{
    td_curves c;
    ck_assert_int_eq(td_curves_init(&c), 0);
    const int n = 5000;
    for (int s = 1; s <= n; s++) {
        json_t *ev = window_ev(10 * s);
        ck_assert_int_eq(td_curves_window(&c, ev), 0);
        json_decref(ev);
    }
    size_t k = json_array_size(c.curve);
    ck_assert_uint_le(k, TD_CURVE_MAX);
    ck_assert_uint_ge(k, TD_CURVE_MAX / 2);
    /* first point the first window, last point near the end, evenly
     * spaced, steps increasing */
    json_int_t first = json_integer_value(json_object_get(
        json_array_get(c.curve, 0), "step"));
    json_int_t last = json_integer_value(json_object_get(
        json_array_get(c.curve, k - 1), "step"));
    ck_assert_int_eq(first, 10);
    ck_assert_int_ge(last, 10 * n - 10 * c.every);
    json_int_t gap = json_integer_value(json_object_get(
        json_array_get(c.curve, 1), "step")) - first;
    ck_assert_int_eq(gap, 10 * c.every);
    for (size_t i = 1; i < k; i++)
        ck_assert_int_eq(json_integer_value(json_object_get(
                             json_array_get(c.curve, i), "step")) -
                             json_integer_value(json_object_get(
                                 json_array_get(c.curve, i - 1), "step")),
                         gap);
    json_t *p = json_array_get(c.curve, 0);
    ck_assert(json_is_null(json_object_get(p, "device_idle_ratio")));
    ck_assert_ptr_null(json_object_get(p, "workers"));
    ck_assert_ptr_nonnull(json_object_get(p, "train_loss"));
    td_curves_free(&c);
}
END_TEST

START_TEST(test_window_reported_again_replaces)
{
    td_curves c;
    ck_assert_int_eq(td_curves_init(&c), 0);
    int steps[] = {10, 20, 30, 40, 20, 30}; /* resumed at step 10 */
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        json_t *ev = window_ev(steps[i]);
        ck_assert_int_eq(td_curves_window(&c, ev), 0);
        json_decref(ev);
    }
    ck_assert_int_eq(json_array_size(c.curve), 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(json_integer_value(json_object_get(
                             json_array_get(c.curve, (size_t)i), "step")),
                         10 * (i + 1));
    td_curves_free(&c);
}
END_TEST

START_TEST(test_record_round_trip)
{
    td_curves c, d;
    ck_assert_int_eq(td_curves_init(&c), 0);
    for (int s = 1; s <= 3000; s++) {
        json_t *ev = window_ev(s);
        td_curves_window(&c, ev);
        json_decref(ev);
    }
    json_t *ev = epoch_ev(0, 0.7);
    td_curves_epoch(&c, ev);
    json_decref(ev);
    json_t *rec = json_object();
    td_curves_to_record(&c, rec);
    char *txt = json_dumps(rec, 0);
    json_t *back = json_loads(txt, 0, NULL);
    ck_assert_int_eq(td_curves_from_record(&d, back), 0);
    ck_assert(json_equal(c.history, d.history));
    ck_assert(json_equal(c.curve, d.curve));
    ck_assert_int_eq(d.every, c.every);
    ck_assert_int_eq(d.windows, c.windows);
    td_curves_free(&d);
    /* an older record: no curves, empty arrays */
    json_t *old = json_pack("{s:i}", "id", 4);
    ck_assert_int_eq(td_curves_from_record(&d, old), 0);
    ck_assert_int_eq(json_array_size(d.history), 0);
    ck_assert_int_eq(d.every, 1);
    td_curves_free(&d);
    td_curves_free(&c);
    json_decref(old);
    json_decref(back);
    json_decref(rec);
    free(txt);
}
END_TEST

/* Epochs from a resumed job's checkpoint fill the gaps, in order, and
 * leave the epochs the history has alone. */
START_TEST(test_restore_fills_gaps)
{
    td_curves c;
    ck_assert_int_eq(td_curves_init(&c), 0);
    json_t *ev = epoch_ev(0, 0.5);
    td_curves_epoch(&c, ev);
    json_decref(ev);
    ev = epoch_ev(3, 0.5); /* 1 and 2 missing (their record was lost) */
    td_curves_epoch(&c, ev);
    json_decref(ev);
    json_t *from = json_array();
    for (int e = 0; e < 3; e++)
        json_array_append_new(from, epoch_ev(e, 0.25));
    ck_assert_int_eq(td_curves_restore(&c, from), 2);
    ck_assert_int_eq(json_array_size(c.history), 4);
    for (int e = 0; e < 4; e++)
        ck_assert_int_eq(json_integer_value(json_object_get(
                             json_array_get(c.history, (size_t)e), "epoch")),
                         e);
    /* epoch 0 kept as it was; 1 restored without the event-only keys */
    ck_assert_double_eq(json_real_value(json_object_get(
                            json_array_get(c.history, 0), "val_acc")), 0.5);
    ck_assert_ptr_null(json_object_get(json_array_get(c.history, 1),
                                       "epochs_total"));
    ck_assert_int_eq(td_curves_restore(&c, from), 0);
    json_decref(from);
    td_curves_free(&c);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("curves");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_epochs_kept_with_their_fields);
    tcase_add_test(tc, test_windows_thinned_cover_the_run);
    tcase_add_test(tc, test_window_reported_again_replaces);
    tcase_add_test(tc, test_record_round_trip);
    tcase_add_test(tc, test_restore_fills_gaps);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(suite)
