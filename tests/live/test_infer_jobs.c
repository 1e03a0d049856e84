/* test_infer_jobs.c - eval and predict through a live traind (issue 16): the
 * same output as the local commands, the submit-time refusals, and their
 * place in the one-job-at-a-time queue (pending behind training, cancel).
 */
#define _GNU_SOURCE
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "support/jpeggen.h"
#include "tdtest.h"

TH_FIXTURE(H)

#define CLI(out, err, ...)                                                   \
    th_cli(&H, (out), (err), (const char *const[]){__VA_ARGS__, NULL})

#define NOBODY 65534

static char data_dir[160], ckpt[4096];

/* A 2-class ImageFolder and a job trained on it for one epoch: its final
 * checkpoint in ckpt. */
static void trained_checkpoint(int fd)
{
    snprintf(data_dir, sizeof data_dir, "%s/data", H.dir);
    td_test_make_labelled_folder(data_dir, 2, 12, 24, 24, 7, NULL);
    int64_t id = th_submit(fd, th_files_spec(data_dir, 1));
    ck_assert(th_wait_state(fd, id, "completed", 120000));
    json_t *r = th_job_request(fd, "show", id);
    const char *p = json_string_value(json_object_get(json_object_get(
        json_object_get(th_ok(r), "job"), "result"), "last_checkpoint"));
    ck_assert_ptr_nonnull(p);
    snprintf(ckpt, sizeof ckpt, "%s", p);
    json_decref(r);
}

static int64_t submit_spec(int fd, json_t *spec)
{
    return th_submit(fd, spec);
}

static json_t *eval_spec(void)
{
    return json_pack("{s:s, s:s, s:s}", "task", "eval", "checkpoint", ckpt,
                     "data", data_dir);
}

/* eval and predict through the daemon print what the local commands
 * print, text and --json; a corrupt image is named and the rest are
 * predicted; the job is in the queue with its result. */
START_TEST(test_same_as_local)
{
    int fd = th_connect(&H, NULL);
    trained_checkpoint(fd);
    char *lo, *le, *dout, *derr;
    ck_assert_int_eq(CLI(&lo, &le, "eval", ckpt, data_dir, "--json"), 0);
    ck_assert_int_eq(CLI(&dout, &derr, "eval", ckpt, data_dir, "--daemon",
                         "--json"), 0);
    ck_assert_msg(strstr(lo, "\"confusion\""), "%s", lo);
    ck_assert_str_eq(dout, lo);
    free(lo);
    free(le);
    free(dout);
    free(derr);
    ck_assert_int_eq(CLI(&lo, NULL, "eval", ckpt, data_dir), 0);
    ck_assert_int_eq(CLI(&dout, NULL, "eval", ckpt, data_dir, "--daemon",
                         "--device", "cpu"), 0);
    ck_assert_msg(strstr(lo, "top-1"), "%s", lo);
    ck_assert_str_eq(dout, lo);
    free(lo);
    free(dout);

    /* predict: a corrupt JPEG in the middle, a relative path too */
    char bad[200], a[200], b[200];
    snprintf(bad, sizeof bad, "%s/corrupt.jpg", H.dir);
    FILE *f = fopen(bad, "w");
    fputs("\xff\xd8 not really a jpeg", f);
    fclose(f);
    snprintf(a, sizeof a, "%s/class0/img000.jpg", data_dir);
    snprintf(b, sizeof b, "%s/class1/img003.jpg", data_dir);
    const char *const loc[] = {"predict", ckpt, a, bad, b, "--top", "2",
                               "--json", NULL};
    const char *const dae[] = {"predict", ckpt, a, bad, b, "--top", "2",
                               "--json", "--daemon", NULL};
    ck_assert_int_eq(th_cli(&H, &lo, &le, loc), 1);
    ck_assert_int_eq(th_cli(&H, &dout, &derr, dae), 1);
    ck_assert_str_eq(dout, lo);
    ck_assert_msg(strstr(derr, "corrupt.jpg: not a readable JPEG or PNG"),
                  "%s", derr);
    ck_assert_msg(strstr(dout, "img003.jpg\",\"top\""), "%s", dout);
    free(lo);
    free(le);
    free(dout);
    free(derr);
    const char *const loc2[] = {"predict", ckpt, a, b, NULL};
    const char *const dae2[] = {"predict", ckpt, a, b, "--daemon", NULL};
    ck_assert_int_eq(th_cli(&H, &lo, NULL, loc2), 0);
    ck_assert_int_eq(th_cli(&H, &dout, NULL, dae2), 0);
    ck_assert_str_eq(dout, lo);
    free(lo);
    free(dout);

    /* jobs like the others: in the queue, completed, with the result */
    ck_assert_int_eq(CLI(&dout, NULL, "queue"), 0);
    ck_assert_msg(strstr(dout, "eval") && strstr(dout, "predict"), "%s",
                  dout);
    /* their progress is images: "e1/0 100%" was epoch 1 of none */
    ck_assert_msg(!strstr(dout, "/0 ") && strstr(dout, " 100% "), "%s",
                  dout);
    free(dout);
    ck_assert_int_eq(CLI(&dout, NULL, "show", "2"), 0);
    ck_assert_msg(strstr(dout, "progress:  100%, image 24 of 24"), "%s",
                  dout);
    free(dout);
    json_t *r = th_job_request(fd, "show", 2);
    json_t *j = json_object_get(th_ok(r), "job");
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")),
                     "completed");
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_object_get(j, "result"), "samples")), 24);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "step")), 24);
    json_decref(r);
    close(fd);

    /* On a terminal: the job's progress on stderr, redrawn in place, then
     * the local command's summary (there was none); the JSON stays a line
     * of its own. */
    if (access("/usr/bin/script", X_OK) != 0)
        return;
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "TRAIND_SOCKET=%s script -qec '%s/client/"
             "trainctl eval %s %s --daemon --json' /dev/null", H.sock,
             getenv("TD_BUILD_ROOT"), ckpt, data_dir);
    int st;
    char *tty = td_test_capture(cmd, &st);
    ck_assert_int_eq(st, 0);
    /* (the job's lines come as its events do: it may be done before
     * trainctl subscribed) */
    ck_assert_msg(strstr(tty, "\r\033[Keval: 24 images in ") &&
                  strstr(tty, "images/s)\r\n{\"checkpoint\":"), "%s", tty);
    free(tty);
}
END_TEST

static void refused(int fd, json_t *spec, const char *cls, const char *msg)
{
    json_t *r = th_request(fd, "submit", json_pack("{s:o}", "spec", spec));
    ck_assert_msg(th_err_class(r) && strcmp(th_err_class(r), cls) == 0,
                  "wanted %s (%s): %s", cls, msg,
                  json_dumps(r, JSON_COMPACT));
    const char *d = json_string_value(json_object_get(
        json_object_get(r, "error"), "desc"));
    ck_assert_msg(strstr(d, msg), "wanted '%s' in: %s", msg, d);
    json_decref(r);
}

/* Decided at submit: the checkpoint opens and is one, the files are the
 * submitter's to read, the images are at most 10,000, no unknown keys. */
START_TEST(test_refused_at_submit)
{
    int fd = th_connect(&H, NULL);
    trained_checkpoint(fd);
    json_t *s = eval_spec();
    json_object_set_new(s, "checkpoint", json_string("/nonexistent/c.st"));
    refused(fd, s, "permission_denied", "checkpoint: /nonexistent/c.st does "
                                        "not exist");
    char junk[200];
    snprintf(junk, sizeof junk, "%s/junk.safetensors", H.dir);
    FILE *f = fopen(junk, "w");
    fputs("this is not a checkpoint", f);
    fclose(f);
    s = eval_spec();
    json_object_set_new(s, "checkpoint", json_string(junk));
    refused(fd, s, "invalid_spec", "checkpoint: ");
    s = eval_spec();
    json_object_set_new(s, "epochs", json_integer(3));
    refused(fd, s, "invalid_spec", "epochs: unknown key for a eval job");
    s = eval_spec();
    json_object_set_new(s, "data", json_string("relative/dir"));
    refused(fd, s, "invalid_spec", "must be an absolute path");
    s = eval_spec();
    json_object_set_new(s, "task", json_string("train"));
    refused(fd, s, "invalid_spec", "task: ");
    json_t *many = json_array();
    char img[200];
    snprintf(img, sizeof img, "%s/class0/img000.jpg", data_dir);
    for (int i = 0; i < 10001; i++)
        json_array_append_new(many, json_string(img));
    refused(fd, json_pack("{s:s, s:s, s:o}", "task", "predict", "checkpoint",
                          ckpt, "images", many),
            "invalid_spec", "images: must be a list of 1..10000");
    refused(fd, json_pack("{s:s, s:s, s:[s, s]}", "task", "predict",
                          "checkpoint", ckpt, "images", img,
                          "/nonexistent.jpg"),
            "permission_denied", "images[1]: /nonexistent.jpg does not exist");

    /* another uid: the checkpoint and the data in a folder only root
     * reads (the harness dir itself is opened to everyone) */
    char priv[200], pck[300], pdata[300], pub[300];
    snprintf(priv, sizeof priv, "%s/private", H.dir);
    ck_assert_int_eq(mkdir(priv, 0700), 0);
    snprintf(pck, sizeof pck, "%s/c.safetensors", priv);
    snprintf(pdata, sizeof pdata, "%s/data", priv);
    char cmd[12000];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && cp -r '%s' '%s'", ckpt, pck,
             data_dir, pdata);
    ck_assert_int_eq(system(cmd), 0);
    int nfd = th_connect_as(&H, NOBODY, NOBODY);
    ck_assert_int_ge(nfd, 0);
    refused(nfd, json_pack("{s:s, s:s, s:s}", "task", "eval", "checkpoint",
                           pck, "data", data_dir),
            "permission_denied", "is not readable by uid 65534");
    snprintf(pub, sizeof pub, "%s/c.safetensors", H.dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && chmod 644 '%s'", ckpt, pub,
             pub);
    ck_assert_int_eq(system(cmd), 0);
    refused(nfd, json_pack("{s:s, s:s, s:s}", "task", "eval", "checkpoint",
                           pub, "data", pdata),
            "permission_denied", "data: ");
    close(nfd);

    /* trainctl: exit 1 for a refusal, 2 for --device without --daemon */
    char *err;
    ck_assert_int_eq(CLI(NULL, &err, "eval", junk, data_dir, "--daemon"), 1);
    ck_assert_msg(strstr(err, "trainctl eval: checkpoint: "), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "predict", ckpt, img, "--device",
                         "cpu"), 2);
    ck_assert_msg(strstr(err, "--device: only with --daemon"), "%s", err);
    free(err);
    close(fd);
}
END_TEST

/* One job at a time on the device: an eval behind a training job waits
 * (pending), a queued one can be cancelled, and the first runs once the
 * training job is done. */
START_TEST(test_queued_behind_training)
{
    int fd = th_connect(&H, NULL);
    trained_checkpoint(fd);
    int64_t train = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, train, "running", 60000));
    int64_t e1 = submit_spec(fd, eval_spec());
    int64_t e2 = submit_spec(fd, eval_spec());
    usleep(300 * 1000);
    ck_assert(th_wait_state(fd, e1, "pending", 30000));
    json_t *r = th_job_request(fd, "cancel", e2);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    ck_assert(th_wait_state(fd, e2, "cancelled", 60000));
    ck_assert(th_wait_state(fd, e1, "pending", 30000));
    r = th_job_request(fd, "checkpoint", e1);
    ck_assert_str_eq(th_err_class(r), "conflict");
    const char *desc = json_string_value(json_object_get(
        json_object_get(r, "error"), "desc"));
    ck_assert_msg(desc && strstr(desc, "is an eval job; only training"),
                  "%s", desc); /* it said "a eval job" */
    json_decref(r);
    r = th_job_request(fd, "cancel", train);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    ck_assert(th_wait_state(fd, e1, "completed", 60000));
    r = th_job_request(fd, "show", e1);
    json_t *j = json_object_get(th_ok(r), "job");
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_object_get(j, "result"), "samples")), 24);
    ck_assert_msg(strstr(json_string_value(json_object_get(j, "reason")),
                         "top-1 "), "%s",
                  json_string_value(json_object_get(j, "reason")));
    json_decref(r);
    r = th_job_request(fd, "show", e2);
    ck_assert(!json_object_get(json_object_get(th_ok(r), "job"), "result"));
    json_decref(r);
    close(fd);
}
END_TEST

/* An eval job over a folder with an unreadable image: the warning that
 * names it goes to the job's log (the failure says "a warning names
 * each"), not only to the daemon's. */
START_TEST(test_bad_image_in_job_log)
{
    int fd = th_connect(&H, NULL);
    trained_checkpoint(fd);
    char bad[300];
    snprintf(bad, sizeof bad, "%s/class0/broken.jpg", data_dir);
    td_test_write_file(bad, "not a jpeg", 10);
    int64_t id = submit_spec(fd, eval_spec());
    ck_assert(th_wait_state(fd, id, "failed", 60000));
    json_t *j = th_show_job(fd, id);
    const char *why = json_string_value(json_object_get(j, "reason"));
    ck_assert_msg(why && strstr(why, "1 bad sample(s) out of 25") &&
                  strstr(why, "remove or replace"), "%s", why);
    json_decref(j);
    ck_assert_msg(th_log_has(fd, id, "broken.jpg: not a JPEG (no SOI "
                             "marker) (TD_E_CORRUPT); skipped"),
                  "job %lld's log has no warning naming broken.jpg",
                  (long long)id);
    close(fd);
}
END_TEST

static Suite *infer_suite(void)
{
    Suite *s = suite_create("infer");
    TCase *tc = tcase_create("infer");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_same_as_local);
    tcase_add_test(tc, test_refused_at_submit);
    tcase_add_test(tc, test_queued_behind_training);
    tcase_add_test(tc, test_bad_image_in_job_log);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(infer_suite)
