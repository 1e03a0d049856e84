/* test_autotune.c - the input autotuner in a live traind: a job whose
 * input is the bottleneck (large JPEGs, a tiny model) and leaves workers
 * and prefetch "auto" gets more decode workers, then a deeper ring, and
 * says so in its log and its window events. */
#include <string.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "support/jpeggen.h"
#include "tdtest.h"

TH_FIXTURE(H)

/* Submits spec, waits until it runs, then reads its window events (at most
 * max_windows) until the worker count moves in direction dir (+1 or -1),
 * or, for dir > 0, the ring grows past its starting 4 slots.  Returns 1 if
 * it did; *first gets the worker count of the first window. */
static int workers_move(int fd, json_t *spec, int dir, int max_windows,
                        int64_t *id, int *first)
{
    *id = th_submit(fd, spec);
    ck_assert(th_wait_state(fd, *id, "running", 20000));
    json_t *r = th_request(fd, "subscribe",
                           json_pack("{s:I, s:[s]}", "job", (json_int_t)*id,
                                     "events", "window"));
    json_decref(r);
    *first = -1;
    int moved = 0;
    for (int i = 0; i < max_windows && !moved; i++) {
        json_t *ev = th_wait_event(fd, "window", *id, NULL, 20000, NULL);
        ck_assert_ptr_nonnull(ev);
        json_t *d = json_object_get(ev, "data");
        int w = (int)json_integer_value(json_object_get(d, "workers"));
        int p = (int)json_integer_value(json_object_get(d, "prefetch"));
        ck_assert_int_gt(w, 0);
        if (getenv("TD_TEST_DEBUG"))
            fprintf(stderr, "window: workers %d prefetch %d input_wait %.4f "
                    "verdict %s\n", w, p, json_number_value(json_object_get(
                        d, "input_wait_ratio")), json_string_value(
                        json_object_get(d, "verdict")));
        if (*first < 0)
            *first = w;
        moved = dir > 0 ? w > *first || p > 4 : w < *first;
        json_decref(ev);
    }
    return moved;
}

static void cancel_job(int fd, int64_t id)
{
    json_t *r = th_job_request(fd, "cancel", id);
    json_decref(r);
    ck_assert(th_wait_state(fd, id, "cancelled", 20000));
}

START_TEST(test_input_bound_job_gets_more_workers)
{
    char *data = td_test_tmpdir("autotune");
    td_test_make_folder(data, 4, 24, 320, 320);
    int fd = th_connect(&H, NULL);
    json_t *spec = json_pack(
        "{s:s, s:{s:s, s:i}, s:{s:[i,i], s:i, s:[{s:s}], s:{s:[f,f,f],"
        " s:[f,f,f]}},"
        " s:{s:[{s:s, s:s, s:i, s:i, s:i}, {s:s, s:s}, {s:s, s:s},"
        "       {s:s, s:s, s:s}]},"
        " s:{s:s, s:f}, s:i, s:i, s:i, s:i, s:{s:i, s:i}, s:{s:i, s:b}}",
        "name", "input-bound", "data", "train", data, "classes", 4, "input",
        "size", 32, 32, "channels", 3, "augment", "op", "random_resized_crop",
        "normalize", "mean", 0.5, 0.5, 0.5, "std", 0.25, 0.25, 0.25, "model",
        "layers", "type", "conv2d", "name", "c1", "channels", 4, "kernel", 3,
        "pad", 1, "type", "relu", "name", "r1", "type", "flatten", "name",
        "f", "type", "dense", "name", "fc", "units", "classes", "optimizer",
        "type", "sgd", "lr", 0.01, "batch_size", 16, "epochs", 100000, "seed",
        1, "threads", 1, "metrics", "warmup_steps", 2, "window_steps", 4,
        "checkpoint", "every_steps", 0, "at_epoch_end", 0);
    int64_t id;
    int first;
    /* Watch the windows: the worker count (or the ring) must grow. */
    ck_assert_msg(workers_move(fd, spec, +1, 40, &id, &first),
                  "workers stayed at %d", first);
    cancel_job(fd, id);
    json_t *r = th_job_request(fd, "logs", id);
    char *logs = json_dumps(th_ok(r), 0);
    ck_assert_msg(strstr(logs, "autotune: "), "%s", logs);
    free(logs);
    json_decref(r);
    close(fd);
    td_test_rmtree(data);
    free(data);
}
END_TEST

/* A compute-bound job (tiny JPEGs, a wider model): the workers idle on a
 * full ring and the trainer never waits, so one of them is taken away. */
START_TEST(test_compute_bound_job_gets_fewer_workers)
{
    char *data = td_test_tmpdir("autotune-down");
    td_test_make_folder(data, 4, 24, 24, 24);
    int fd = th_connect(&H, NULL);
    json_t *spec = json_pack(
        "{s:s, s:{s:s, s:i}, s:{s:[i,i], s:i, s:{s:[f,f,f], s:[f,f,f]}},"
        " s:{s:[{s:s, s:s, s:i, s:i, s:i}, {s:s, s:s}, {s:s, s:s, s:i,"
        " s:i, s:i}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s, s:s}]},"
        " s:{s:s, s:f}, s:i, s:i, s:i, s:i, s:{s:i, s:i}, s:{s:i, s:b}}",
        "name", "compute-bound", "data", "train", data, "classes", 4,
        "input", "size", 24, 24, "channels", 3, "normalize",
        "mean", 0.5, 0.5, 0.5, "std", 0.25, 0.25, 0.25, "model", "layers",
        "type", "conv2d", "name", "c1", "channels", 64, "kernel", 3, "pad", 1,
        "type", "relu", "name", "r1", "type", "conv2d", "name", "c2",
        "channels", 64, "kernel", 3, "pad", 1, "type", "relu", "name", "r2",
        "type", "flatten", "name", "f", "type", "dense", "name", "fc",
        "units", "classes", "optimizer", "type", "sgd", "lr", 0.01,
        "batch_size", 16, "epochs", 100000, "seed", 1, "threads", 1,
        "metrics", "warmup_steps", 2, "window_steps", 4, "checkpoint",
        "every_steps", 0, "at_epoch_end", 0);
    ck_assert_ptr_nonnull(spec); /* workers and prefetch: "auto" */
    int64_t id;
    int first;
    int shrank = workers_move(fd, spec, -1, 60, &id, &first);
    ck_assert_msg(first > 1, "started with %d worker(s)", first);
    ck_assert_msg(shrank, "workers stayed at %d", first);
    cancel_job(fd, id);
    close(fd);
    td_test_rmtree(data);
    free(data);
}
END_TEST

static Suite *autotune_suite(void)
{
    Suite *s = suite_create("autotune");
    TCase *tc = tcase_create("live");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_input_bound_job_gets_more_workers);
    tcase_add_test(tc, test_compute_bound_job_gets_fewer_workers);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(autotune_suite)
