/* test_zoo.c - where zoo models are looked up, in the documented order:
 * $TD_MODELS_DIR, the models/ folder beside a job file's folder, the
 * source tree's zoo for a binary run from the build tree (this test is
 * one), then the installed share/traind/models. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/zoo.h"
#include "td_config.h"
#include "tdtest.h"

static char tmp[64];

static void setup(void)
{
    unsetenv("TD_MODELS_DIR");
    snprintf(tmp, sizeof tmp, "/tmp/td-zoo-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    td_test_sh(tmp, "mkdir -p proj/jobs proj/models lone/jobs");
}

static void teardown(void) { td_test_sh("/", "rm -rf '%s'", tmp); }

START_TEST(test_environment_wins)
{
    char out[4096], job[256];
    snprintf(job, sizeof job, "%s/proj/jobs/a.json", tmp);
    setenv("TD_MODELS_DIR", "/somewhere/else", 1);
    td_models_dir(job, out, sizeof out);
    ck_assert_str_eq(out, "/somewhere/else");
    td_models_dir(NULL, out, sizeof out);
    ck_assert_str_eq(out, "/somewhere/else");
}
END_TEST

START_TEST(test_empty_environment_is_ignored)
{
    char out[4096];
    setenv("TD_MODELS_DIR", "", 1);
    td_models_dir(NULL, out, sizeof out);
    ck_assert_str_eq(out, TD_SOURCE_MODELS_DIR);
}
END_TEST

START_TEST(test_models_beside_the_jobs_folder)
{
    char out[4096], job[256], want[256];
    snprintf(job, sizeof job, "%s/proj/jobs/a.json", tmp);
    snprintf(want, sizeof want, "%s/proj/jobs/../models", tmp);
    td_models_dir(job, out, sizeof out);
    ck_assert_str_eq(out, want);
    /* The job file itself need not exist yet; the folder must. */
    struct stat st;
    ck_assert_int_eq(stat(out, &st), 0);
}
END_TEST

START_TEST(test_no_sibling_falls_back_to_the_source_zoo)
{
    /* A test binary lives in the build tree, so the fallback is the
     * source tree's config/models, never a half-made sibling path. */
    char out[4096], job[256];
    snprintf(job, sizeof job, "%s/lone/jobs/a.json", tmp);
    td_models_dir(job, out, sizeof out);
    ck_assert_str_eq(out, TD_SOURCE_MODELS_DIR);
    td_models_dir(NULL, out, sizeof out);
    ck_assert_str_eq(out, TD_SOURCE_MODELS_DIR);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/fmnist-cnn.json", out);
    ck_assert_int_eq(access(probe, R_OK), 0);
}
END_TEST

static Suite *zoo_suite(void)
{
    Suite *s = suite_create("zoo");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_environment_wins);
    tcase_add_test(tc, test_empty_environment_is_ignored);
    tcase_add_test(tc, test_models_beside_the_jobs_folder);
    tcase_add_test(tc, test_no_sibling_falls_back_to_the_source_zoo);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(zoo_suite)
