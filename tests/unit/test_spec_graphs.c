/* test_spec_graphs.c - the job spec's "cuda_graphs" (auto | on | off,
 * default auto): parsed into enum td_cuda_graphs, refused otherwise with
 * the accepted names, and left out of the spec hash (graphs on and off
 * compute bitwise the same, so a job resumes under either).
 */
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "job/spec.h"
#include "tdtest.h"

static const char *job =
    "{\"name\": \"g\", \"data\": {\"train\": \"/d/train\", \"classes\": 10},"
    " \"input\": {\"size\": [28, 28], \"channels\": 1},"
    " \"model\": \"fmnist-cnn\", \"optimizer\": {\"type\": \"sgd\","
    " \"lr\": 0.05}, \"batch_size\": 64, \"epochs\": 1}";

/* Parses `job` with `set` applied (NULL: none): the code, the spec. */
static int parse(const char *set, td_job_spec *s, char *err, size_t cap)
{
    json_error_t je;
    json_t *j = json_loads(job, 0, &je);
    ck_assert_msg(j != NULL, "test JSON: %s", je.text);
    int r = set ? td_spec_apply_set(j, set, err, cap) : 0;
    if (r == 0)
        r = td_spec_parse(j, NULL, s, err, cap);
    json_decref(j);
    return r;
}

START_TEST(test_default_auto_and_names)
{
    td_job_spec s;
    char err[256] = "";
    ck_assert_msg(parse(NULL, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(s.cuda_graphs, TD_GRAPHS_AUTO);
    ck_assert_str_eq(json_string_value(json_object_get(s.json,
                                                       "cuda_graphs")),
                     "auto");
    td_spec_free(&s);
    const char *sets[] = {"cuda_graphs=off", "cuda_graphs=on",
                          "cuda_graphs=auto"};
    const int want[] = {TD_GRAPHS_OFF, TD_GRAPHS_ON, TD_GRAPHS_AUTO};
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(parse(sets[i], &s, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(s.cuda_graphs, want[i]);
        td_spec_free(&s);
    }
}
END_TEST

START_TEST(test_bad_value_refused)
{
    td_job_spec s;
    char err[256] = "";
    ck_assert_int_eq(parse("cuda_graphs=sometimes", &s, err, sizeof err),
                     TD_E_SPEC);
    ck_assert_str_eq(err, "cuda_graphs: must be one of off, on, auto");
    ck_assert_int_eq(parse("cuda_graphs=true", &s, err, sizeof err),
                     TD_E_SPEC);
    ck_assert_str_eq(err, "cuda_graphs: must be one of off, on, auto");
}
END_TEST

START_TEST(test_not_hashed)
{
    td_job_spec a, b;
    char err[256] = "";
    ck_assert_msg(parse(NULL, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(parse("cuda_graphs=off", &b, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_uint_eq(td_spec_hash(&a), td_spec_hash(&b));
    td_spec_free(&b);
    /* while a field that changes the computation is hashed */
    ck_assert_msg(parse("seed=2", &b, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_ne(td_spec_hash(&a), td_spec_hash(&b));
    td_spec_free(&a);
    td_spec_free(&b);
}
END_TEST

static Suite *spec_graphs_suite(void)
{
    Suite *s = suite_create("spec_graphs");
    TCase *tc = tcase_create("cuda_graphs");
    tcase_add_test(tc, test_default_auto_and_names);
    tcase_add_test(tc, test_bad_value_refused);
    tcase_add_test(tc, test_not_hashed);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(spec_graphs_suite)
