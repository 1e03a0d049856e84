/* test_backend_tune.c - the bf16 plan's choices (cpu_tune.c): measured
 * at create, recorded as text, planned again from the text.
 *
 * (a) The text of a fixed plan names every layer ('.' for all but the
 *     convolutions and batch norms) and says, per convolution, exactly
 *     the kernels the plan's debug lines say it planned.
 * (b) Choices turned the other way by plan_set between steps (the text
 *     re-planned is what plan_get then gives back), and training goes on
 *     bit for bit as in a backend created fresh, given the same text and
 *     the first backend's snapshot: re-planning keeps parameters,
 *     optimizer state and running statistics, like a resume.
 * (c) A measured plan (cfg.plan TD_PLAN_MEASURE) logs its summary, leaves
 *     the parameters, optimizer state and statistics as a fixed plan's
 *     (snapshots equal after create), and trains bit for bit like a fixed
 *     backend given its text; an environment switch (TD_CPU_BWDW=0)
 *     forces its choice in a measured plan.
 * (d) Text that does not fit is refused naming what is wrong (version,
 *     layout, length, a character for the wrong kind of layer), and the
 *     backend still trains; an fp32 backend has no text (-ENOTSUP).
 * (e) The whole-plan choices: text with the other activation layout and
 *     oneDNN's batch norms re-plans so (the text given back says it) and
 *     trains bit for bit like a backend created with that text; the
 *     "v1" text of before (no batch norm choices) plans the rules' batch
 *     norms; a measured plan says what it measured of both, and the
 *     environment switches TD_CPU_NHWC and TD_CPU_BN force them; a
 *     model whose other layout cannot be planned (a layer oneDNN has
 *     only a reference kernel for there) is measured in its own.
 * Without arguments: this CPU's bf16 plan (skipped without bf16); with
 * --blocked (backend_tune_blocked): oneDNN limited to avx512_core_bf16,
 * the blocked nChw16c plan of AMD Zen 4/5.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/caps.h"
#include "base/log.h"
#include "cpu_ab.h"
#include "model/model.h"
#include "tdtest.h"

enum { N = 16, HW = 16 };

static int g_measured;        /* "plan measured" summaries logged */
static char g_summary[1024]; /* the latest */

static void sink(void *user, int level, long job, const char *line)
{
    (void)level;
    (void)job;
    if (strstr(line, "cpu_bwdw ("))
        (*(int *)user)++;
    if (strstr(line, "cpu backend: plan measured in")) {
        g_measured++;
        snprintf(g_summary, sizeof g_summary, "%s", line);
    }
}

static td_backend *make(const td_model *m, enum td_plan_mode plan,
                        int *bwdw_lines)
{
    td_backend_config cfg = {.batch = N, .threads = 2, .seed = 7,
                             .dtype = TD_BF16, .std = {1, 1, 1},
                             .plan = plan};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *be = NULL;
    char err[256] = "";
    int lines = 0, level = td_log_get_level();
    td_log_set_level(TD_LOG_DEBUG);
    td_log_set_sink(sink, &lines);
    int rc = td_backend_create("cpu", m, &cfg, &be, err, sizeof err);
    td_log_set_sink(NULL, NULL);
    td_log_set_level(level);
    ck_assert_msg(rc == 0, "create: %s", err);
    if (bwdw_lines)
        *bwdw_lines = lines;
    return be;
}

static void text(td_backend *be, char *out, size_t cap)
{
    int rc = td_backend_plan_get(be, out, cap);
    ck_assert_msg(rc == 0, "plan_get: %d", rc);
}

/* The layer characters of text t (after "v2 <layout> "). */
static const char *chars(const char *t)
{
    const char *s = strchr(t + 3, ' ');
    ck_assert_ptr_nonnull(s);
    return s + 1;
}

static void train(td_backend *a, td_backend *b, int first, int last)
{
    for (int t = first; t <= last; t++)
        td_ab_step(a, b, N, HW, HW, t);
}

static float *snap(td_backend *be, const td_model *m, size_t *n)
{
    *n = td_backend_snapshot_floats(m, &be->cfg.optim);
    float *s = malloc(*n * sizeof *s);
    ck_assert_int_eq(td_backend_snapshot(be, s, *n), 0);
    return s;
}

static void same_state(td_backend *a, td_backend *b, const td_model *m,
                       const char *what)
{
    size_t na, nb;
    float *sa = snap(a, m, &na), *sb = snap(b, m, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_msg(memcmp(sa, sb, na * sizeof *sa) == 0,
                  "%s: parameters, optimizer state or statistics differ",
                  what);
    free(sa);
    free(sb);
}

static void same_losses(td_backend *a, td_backend *b, const char *what)
{
    td_step_stats sa, sb;
    td_backend_read_stats(a, &sa);
    td_backend_read_stats(b, &sb);
    ck_assert_msg(sa.loss_sum == sb.loss_sum && sa.correct == sb.correct,
                  "%s: loss sums %.9g and %.9g", what, sa.loss_sum,
                  sb.loss_sum);
}

/* The text with every convolution's choices turned the other way. */
static void flipped(const char *t, char *out, size_t cap)
{
    snprintf(out, cap, "%s", t);
    for (char *c = (char *)chars(out); *c; c++)
        if (*c >= '0' && *c <= '3')
            *c = (char)('0' + (3 - (*c - '0')));
}

START_TEST(test_fixed_text_says_what_was_planned)
{
    td_model *m = td_ab_stack(32);
    int lines;
    td_backend *be = make(m, TD_PLAN_FIXED, &lines);
    char t[256];
    text(be, t, sizeof t);
    const char *c = chars(t);
    ck_assert_int_eq((int)strlen(c), m->nlayers);
    ck_assert_msg(strncmp(t, "v2 nhwc ", 8) == 0 ||
                      strncmp(t, "v2 nChw16c ", 11) == 0,
                  "a bf16 plan's layout: %s", t);
    int bw = 0;
    for (int L = 0; L < m->nlayers; L++) {
        int conv = L > 0 && m->layers[L].kind == TD_L_CONV;
        /* the rule: the hand-written batch norm (16, 32 channels) */
        int bn = m->layers[L].kind == TD_L_BN;
        ck_assert_msg(conv ? c[L] >= '0' && c[L] <= '3'
                      : bn ? c[L] == 'h' : c[L] == '.',
                      "layer %d (%s): '%c' in %s", L, m->layers[L].name,
                      c[L], t);
        bw += conv && ((c[L] - '0') & 1);
        /* the first convolution reads the input: no backward data */
        if (L == 1)
            ck_assert_msg(!((c[L] - '0') & 2), "%s", t);
    }
    ck_assert_int_eq(bw, lines);
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

/* The backends a and b train steps 1 and 2 alike; then a is planned
 * again between steps with flip(its text) (*got: the text planned; a
 * choice that cannot be made here stays), and c, created with that text
 * and b's snapshot, trains steps 3-5 bit for bit as a does: re-planning
 * keeps parameters, optimizer state and running statistics, like a
 * resume.  Returns c. */
static td_backend *replan_like_resume(const td_model *m, td_backend *a,
                                      td_backend *b,
                                      void (*flip)(const char *, char *,
                                                   size_t),
                                      char *rule, char *got, size_t cap)
{
    char want[256], again[256];
    text(a, rule, cap);
    train(a, b, 1, 2);
    same_losses(a, b, "the same plan");
    flip(rule, want, sizeof want);
    int rc = td_backend_plan_set(a, want);
    text(a, got, cap);
    ck_assert_msg(rc == 0 || (rc == -EINVAL && strstr(a->err,
                                                      "cannot all be made")),
                  "plan_set %s: %d %s", want, rc, a->err);
    td_backend *c = make(m, TD_PLAN_FIXED, NULL);
    ck_assert_msg(td_backend_plan_set(c, got) == 0, "%s", c->err);
    text(c, again, sizeof again);
    ck_assert_str_eq(again, got);
    size_t n;
    float *s = snap(b, m, &n);
    ck_assert_int_eq(td_backend_restore(c, s, n), 0);
    free(s);
    train(a, c, 3, 5);
    same_losses(a, c, "re-planned against created with the text");
    same_state(a, c, m, "re-planned against created with the text");
    return c;
}

START_TEST(test_replan_keeps_state_like_a_resume)
{
    td_model *m = td_ab_stack(32);
    td_backend *a = make(m, TD_PLAN_FIXED, NULL);
    td_backend *b = make(m, TD_PLAN_FIXED, NULL);
    char rule[256], got[256];
    size_t n;
    /* a turns its kernel choices over */
    td_backend *c = replan_like_resume(m, a, b, flipped, rule, got,
                                       sizeof got);
    ck_assert_msg(strcmp(got, rule) != 0, "nothing could be turned: %s",
                  rule);
    /* and the other kernels computed differently from b's */
    for (int t = 3; t <= 5; t++) {
        td_ab_upload(b, b, N, HW, HW, t);
        ck_assert_int_eq(td_backend_train_step(b, 0.05f, t), 0);
    }
    size_t na;
    float *sa = snap(a, m, &na), *sb = snap(b, m, &n);
    ck_assert_msg(memcmp(sa, sb, n * sizeof *sa) != 0,
                  "the choices %s and %s computed bit for bit the same",
                  rule, got);
    free(sa);
    free(sb);
    td_backend_destroy(a);
    td_backend_destroy(b);
    td_backend_destroy(c);
    td_model_free(m);
}
END_TEST

START_TEST(test_measured_plan_is_its_text)
{
    td_model *m = td_ab_stack(32);
    g_measured = 0;
    td_backend *a = make(m, TD_PLAN_MEASURE, NULL);
    ck_assert_int_eq(g_measured, 1);
    td_backend *b = make(m, TD_PLAN_FIXED, NULL);
    same_state(a, b, m, "right after create");
    char t[256], u[256];
    text(a, t, sizeof t);
    ck_assert_msg(td_backend_plan_set(b, t) == 0, "%s", b->err);
    text(b, u, sizeof u);
    ck_assert_str_eq(u, t);
    train(a, b, 1, 3);
    same_losses(a, b, "measured against its text");
    same_state(a, b, m, "measured against its text");
    td_backend_destroy(a);
    td_backend_destroy(b);
    /* a second measured backend of the same shapes takes every time
     * from the process's cache, and so the same choices */
    td_backend *c = make(m, TD_PLAN_MEASURE, NULL);
    text(c, u, sizeof u);
    ck_assert_str_eq(u, t);
    td_backend_destroy(c);
    td_model_free(m);
}
END_TEST

START_TEST(test_environment_forces_a_measured_choice)
{
    td_model *m = td_ab_stack(32);
    setenv("TD_CPU_BWDW", "0", 1);
    int lines;
    td_backend *be = make(m, TD_PLAN_MEASURE, &lines);
    unsetenv("TD_CPU_BWDW");
    char t[256];
    text(be, t, sizeof t);
    ck_assert_int_eq(lines, 0);
    for (const char *c = chars(t); *c; c++)
        ck_assert_msg(*c < '0' || *c > '3' || !((*c - '0') & 1), "%s", t);
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

START_TEST(test_bad_text_is_refused)
{
    td_model *m = td_ab_stack(32);
    td_backend *a = make(m, TD_PLAN_FIXED, NULL);
    td_backend *b = make(m, TD_PLAN_FIXED, NULL);
    char t[256], bad[300];
    text(a, t, sizeof t);
    const char *c = chars(t);
    int off = (int)(c - t);
    struct {
        const char *why;
        char text[300];
    } cases[6];
    snprintf(cases[0].text, sizeof cases[0].text, "v3%s", t + 2);
    cases[0].why = "not \"v2";
    snprintf(cases[1].text, sizeof cases[1].text, "v2 nCdhw8c %s", c);
    cases[1].why = "unknown layout \"nCdhw8c\"";
    snprintf(cases[2].text, sizeof cases[2].text, "%s.", t);
    cases[2].why = "layers; the model has";
    snprintf(cases[3].text, sizeof cases[3].text, "%s", t);
    cases[3].text[off + 3] = '1'; /* layer 3 is a relu */
    cases[3].why = "expected '.'";
    snprintf(cases[4].text, sizeof cases[4].text, "%s", t);
    cases[4].text[off + 1] = '7'; /* layer 1 is a convolution */
    cases[4].why = "0..3 (a convolution)";
    snprintf(cases[5].text, sizeof cases[5].text, "%s", t);
    cases[5].text[off + 2] = '1'; /* layer 2 is a batch norm */
    cases[5].why = "'h', 'o' or '.' (a batch norm)";
    ck_assert_int_eq(m->layers[2].kind, TD_L_BN);
    ck_assert_int_eq(m->layers[3].kind, TD_L_RELU);
    for (int i = 0; i < 6; i++) {
        snprintf(bad, sizeof bad, "%s", cases[i].text);
        int rc = td_backend_plan_set(a, bad);
        ck_assert_msg(rc == -EINVAL && strstr(a->err, cases[i].why),
                      "\"%s\": %d %s", bad, rc, a->err);
        char now[256];
        text(a, now, sizeof now);
        ck_assert_str_eq(now, t);
    }
    train(a, b, 1, 2);
    same_losses(a, b, "after refused texts");
    /* an fp32 plan has no choices: none to record, none to set */
    td_backend_config cfg = {.batch = N, .threads = 2, .seed = 7,
                             .dtype = TD_F32, .std = {1, 1, 1},
                             .plan = TD_PLAN_MEASURE};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *f = NULL;
    char err[256];
    ck_assert_int_eq(td_backend_create("cpu", m, &cfg, &f, err, sizeof err),
                     0);
    ck_assert_int_eq(td_backend_plan_get(f, bad, sizeof bad), -ENOTSUP);
    ck_assert_int_eq(td_backend_plan_set(f, t), -ENOTSUP);
    ck_assert_ptr_nonnull(strstr(f->err, "fp32 plan has none"));
    td_backend_destroy(f);
    td_backend_destroy(a);
    td_backend_destroy(b);
    td_model_free(m);
}
END_TEST

/* t with the other layout and every 'h' turned 'o'. */
static void whole_flipped(const char *t, char *out, size_t cap)
{
    int nhwc = strncmp(t, "v2 nhwc ", 8) == 0;
    snprintf(out, cap, "v2 %s %s", nhwc ? "nChw16c" : "nhwc", chars(t));
    for (char *c = (char *)chars(out); *c; c++)
        if (*c == 'h')
            *c = 'o';
}

START_TEST(test_layout_and_batch_norm_are_choices)
{
    td_model *m = td_ab_stack(32);
    td_backend *a = make(m, TD_PLAN_FIXED, NULL);
    td_backend *b = make(m, TD_PLAN_FIXED, NULL);
    char rule[256], want[256], got[256], again[256];
    /* a kernel may not apply in the other layout; the layout and the
     * batch norms always do */
    td_backend *c = replan_like_resume(m, a, b, whole_flipped, rule, got,
                                       sizeof got);
    whole_flipped(rule, want, sizeof want);
    ck_assert_msg(strncmp(got, want, strlen(want) - strlen(chars(want))) ==
                      0, "asked %s, planned %s", want, got);
    ck_assert_msg(strchr(chars(got), 'o') && !strchr(chars(got), 'h'),
                  "asked %s, planned %s", want, got);
    /* the v1 text of before: the rules' batch norms, back to 'h' */
    char v1[256];
    snprintf(v1, sizeof v1, "v1%s", rule + 2);
    for (char *p = (char *)chars(v1); *p; p++)
        if (*p == 'h')
            *p = '.';
    ck_assert_msg(td_backend_plan_set(a, v1) == 0, "%s: %s", v1, a->err);
    text(a, again, sizeof again);
    ck_assert_str_eq(again, rule);
    td_backend_destroy(a);
    td_backend_destroy(b);
    td_backend_destroy(c);
    td_model_free(m);
}
END_TEST

/* A measured plan times the layout and the batch norms and says so; an
 * environment switch forces either and skips its timing. */
START_TEST(test_whole_plan_choices_measured_or_forced)
{
    td_model *m = td_ab_stack(48); /* shapes no other test measured */
    td_backend *f = make(m, TD_PLAN_FIXED, NULL);
    char rule[256], t[256];
    text(f, rule, sizeof rule);
    td_backend_destroy(f);
    g_summary[0] = '\0';
    td_backend *be = make(m, TD_PLAN_MEASURE, NULL);
    ck_assert_msg(strstr(g_summary, "; layout ") || strstr(g_summary,
                  "): layout "), "%s", g_summary);
    ck_assert_msg(strstr(g_summary, "batch norm "), "%s", g_summary);
    text(be, t, sizeof t);
    ck_assert_msg(strstr(g_summary, t), "summary %s, text %s", g_summary,
                  t);
    td_backend_destroy(be);
    /* forced: the other layout, oneDNN's batch norms */
    int nhwc = strncmp(rule, "v2 nhwc ", 8) == 0;
    setenv("TD_CPU_NHWC", nhwc ? "0" : "1", 1);
    setenv("TD_CPU_BN", "onednn", 1);
    g_summary[0] = '\0';
    be = make(m, TD_PLAN_MEASURE, NULL);
    unsetenv("TD_CPU_NHWC");
    unsetenv("TD_CPU_BN");
    text(be, t, sizeof t);
    ck_assert_msg(strncmp(t, nhwc ? "v2 nhwc " : "v2 nChw16c ",
                          nhwc ? 8 : 11) != 0, "%s", t);
    ck_assert_msg(!strchr(chars(t), 'h'), "%s", t);
    ck_assert_msg(!strstr(g_summary, "layout ") &&
                      !strstr(g_summary, "batch norm "), "%s", g_summary);
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

/* Where the fixed rules plan a model, a measured plan does too, though
 * the other layout cannot be planned: TD_AB_STEM3's 3 -> 8 channel stem
 * has no AVX512_BF16 backward-weights kernel in oneDNN 2.6 (blocked), but
 * one on AMX (channels-last).  It crashed the first measuring code. */
START_TEST(test_measured_plans_where_fixed_does)
{
    td_model *m = td_ab_model(TD_AB_STEM3_JSON, (td_shape){3, 32, 32});
    td_backend_config cfg = {.batch = N, .threads = 2, .seed = 7,
                             .dtype = TD_BF16, .std = {1, 1, 1},
                             .plan = TD_PLAN_FIXED};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *f = NULL;
    char err[256] = "", rule[256], t[256];
    if (td_backend_create("cpu", m, &cfg, &f, err, sizeof err) != 0) {
        /* the blocked plan: the rule itself cannot plan it, and the
         * measured plan fails as it does */
        cfg.plan = TD_PLAN_MEASURE;
        ck_assert_int_ne(td_backend_create("cpu", m, &cfg, &f, err,
                                           sizeof err), 0);
        td_model_free(m);
        return;
    }
    text(f, rule, sizeof rule);
    td_backend_destroy(f);
    g_summary[0] = '\0';
    td_backend *be = make(m, TD_PLAN_MEASURE, NULL);
    text(be, t, sizeof t);
    ck_assert_msg(strstr(g_summary, "cannot be planned") ||
                      strstr(g_summary, "the step time"), "%s", g_summary);
    if (strstr(g_summary, "cannot be planned")) {
        ck_assert_msg(strncmp(t, rule, (size_t)(chars(rule) - rule)) == 0,
                      "the rule's layout %s, measured %s", rule, t);
        /* given as text, that layout is refused with oneDNN's reason,
         * and the backend keeps its plan and trains */
        char other[256], now[256];
        snprintf(other, sizeof other, "v2 %s %s",
                 strncmp(t, "v2 nhwc ", 8) == 0 ? "nChw16c" : "nhwc",
                 chars(t));
        ck_assert_int_ne(td_backend_plan_set(be, other), 0);
        ck_assert_msg(strstr(be->err, "reference"), "%s", be->err);
        text(be, now, sizeof now);
        ck_assert_str_eq(now, t);
        td_ab_upload(be, be, N, 32, 32, 1);
        ck_assert_int_eq(td_backend_train_step(be, 0.05f, 1), 0);
    }
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--blocked") == 0) {
        int skip = td_ab_need_avx512_bf16();
        if (skip)
            return skip;
    } else if (!td_cpu_caps_get()->bf16) {
        printf("SKIP: no bf16 on this CPU\n");
        return TD_TEST_SKIP;
    }
    Suite *s = suite_create("backend_tune");
    TCase *tc = tcase_create("backend_tune");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fixed_text_says_what_was_planned);
    tcase_add_test(tc, test_replan_keeps_state_like_a_resume);
    tcase_add_test(tc, test_measured_plan_is_its_text);
    tcase_add_test(tc, test_environment_forces_a_measured_choice);
    tcase_add_test(tc, test_bad_text_is_refused);
    tcase_add_test(tc, test_layout_and_batch_norm_are_choices);
    tcase_add_test(tc, test_whole_plan_choices_measured_or_forced);
    tcase_add_test(tc, test_measured_plans_where_fixed_does);
    suite_add_tcase(s, tc);
    return td_test_run(s);
}
