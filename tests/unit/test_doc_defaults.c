/* test_doc_defaults.c - the defaults docs/job-spec.md documents are the
 * ones lib/job/spec.c applies.
 *
 * Parses the field tables of docs/job-spec.md (`| `path` | type | `default`
 * | meaning |`), parses a minimal spec, and compares every documented
 * default with the normalised spec spec.c produces; the optimizer's
 * defaults are also compared with the parsed C struct the runner reads.
 * A default changed in spec.c without the page (or the reverse) fails
 * here, naming the field.  The page is read from $TD_SOURCE_ROOT. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "job/spec.h"
#include "tdtest.h"

#define MAX_ROWS 128

typedef struct doc_row {
    char path[96];
    char def[128];   /* the default cell, as written */
    int optimizer;   /* from the optimizer defaults table */
} doc_row;

/* Copies cell `col` (0-based) of a markdown table row into out, trimmed;
 * 0 or -1 when the row has fewer cells.  "\|" inside a cell is kept. */
static int cell(const char *row, int col, char *out, size_t cap)
{
    const char *p = row;
    if (*p != '|')
        return -1;
    for (int c = 0;; c++) {
        const char *b = ++p;
        while (*p && !(*p == '|' && p[-1] != '\\'))
            p++;
        if (!*p)
            return -1;
        if (c == col) {
            while (b < p && *b == ' ')
                b++;
            const char *e = p;
            while (e > b && e[-1] == ' ')
                e--;
            snprintf(out, cap, "%.*s", (int)(e - b), b);
            return 0;
        }
    }
}

/* The rows of the tables under "## Fields" whose first cell is a
 * backticked path. */
static int read_rows(doc_row *rows, int cap)
{
    const char *root = getenv("TD_SOURCE_ROOT");
    char path[4096], line[2048], c0[128];
    snprintf(path, sizeof path, "%s/docs/job-spec.md", root ? root : ".");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    int n = 0, in_fields = 0, optimizer = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "## ", 3) == 0)
            in_fields = strncmp(line, "## Fields", 9) == 0;
        if (strncmp(line, "### ", 4) == 0)
            optimizer = strncmp(line, "### Optimizer defaults", 22) == 0;
        if (!in_fields || cell(line, 0, c0, sizeof c0) || c0[0] != '`')
            continue;
        ck_assert_int_lt(n, cap);
        doc_row *r = &rows[n++];
        size_t l = strlen(c0);
        ck_assert_msg(l > 2 && c0[l - 1] == '`', "bad path cell %s", c0);
        snprintf(r->path, sizeof r->path, "%.*s", (int)(l - 2), c0 + 1);
        ck_assert_int_eq(cell(line, 2, r->def, sizeof r->def), 0);
        r->optimizer = optimizer;
    }
    fclose(f);
    return n;
}

/* The value at a dotted path of the normalised spec, or NULL. */
static json_t *at(json_t *root, const char *path)
{
    char buf[96];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = root;
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && v;
         k = strtok_r(NULL, ".", &save))
        v = json_object_get(v, k);
    return v;
}

static int same(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b)) {
        double x = json_number_value(a), y = json_number_value(b);
        return fabs(x - y) <= 1e-12 * (1 + fabs(y));
    }
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b))
            return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same(json_array_get(a, i), json_array_get(b, i)))
                return 0;
        return 1;
    }
    return json_equal(a, b);
}

/* A documented default: "`JSON`", or "`N` per channel"; NULL for the
 * cells that are not one value ("required", "see below"). */
static json_t *documented(const char *def, int *per_channel)
{
    const char *end = def[0] == '`' ? strchr(def + 1, '`') : NULL;
    *per_channel = end && strcmp(end + 1, " per channel") == 0;
    if (!end || (end[1] && !*per_channel))
        return NULL;
    json_error_t je;
    json_t *v = json_loadb(def + 1, (size_t)(end - def - 1),
                           JSON_DECODE_ANY, &je);
    ck_assert_msg(v != NULL, "default %s is not JSON: %s", def, je.text);
    return v;
}

static void parse(const char *text, td_job_spec *s)
{
    char err[512];
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    ck_assert_ptr_nonnull(j);
    ck_assert_msg(td_spec_parse(j, NULL, s, err, sizeof err) == 0, "%s", err);
    json_decref(j);
}

static const char *minimal =
    "{\"model\": \"m\", \"optimizer\": {\"lr\": 0.5},"
    " \"data\": {\"train\": \"/nonexistent/train\"}}";

START_TEST(test_documented_defaults_are_applied)
{
    doc_row rows[MAX_ROWS];
    int n = read_rows(rows, MAX_ROWS), checked = 0, opt_checked = 0;
    td_job_spec s;
    parse(minimal, &s);
    json_t *norm = td_spec_to_json(&s);
    ck_assert_ptr_nonnull(norm);
    for (int i = 0; i < n; i++) {
        int per_channel;
        json_t *want = documented(rows[i].def, &per_channel);
        if (!want)
            continue;
        json_t *got = at(norm, rows[i].path);
        ck_assert_msg(got != NULL, "docs/job-spec.md documents %s, the "
                      "normalised spec has no such field", rows[i].path);
        if (per_channel) {
            ck_assert_msg(json_array_size(got) == 3, "%s: not one value per "
                          "channel", rows[i].path);
            for (size_t c = 0; c < json_array_size(got); c++)
                ck_assert_msg(same(json_array_get(got, c), want),
                              "%s[%zu]: documented %s", rows[i].path, c,
                              rows[i].def);
        } else {
            char *g = json_dumps(got, JSON_ENCODE_ANY);
            ck_assert_msg(same(got, want), "%s: docs/job-spec.md says %s, "
                          "lib/job/spec.c applies %s", rows[i].path,
                          rows[i].def, g);
            free(g);
        }
        json_decref(want);
        checked++;
        opt_checked += rows[i].optimizer;
    }
    /* every optimizer row but the required lr, and the rest of the page */
    ck_assert_int_eq(opt_checked, 11);
    ck_assert_int_ge(checked, 34);
    json_decref(norm);
    td_spec_free(&s);
}
END_TEST

/* The optimizer's documented defaults in the struct the runner reads. */
START_TEST(test_optimizer_defaults_in_the_struct)
{
    doc_row rows[MAX_ROWS];
    int n = read_rows(rows, MAX_ROWS), seen = 0;
    td_job_spec s;
    parse(minimal, &s);
    for (int i = 0; i < n; i++) {
        if (!rows[i].optimizer)
            continue;
        const char *p = rows[i].path + strlen("optimizer.");
        int pc;
        json_t *w = documented(rows[i].def, &pc);
        if (strcmp(p, "lr") == 0) {
            ck_assert_str_eq(rows[i].def, "required");
            seen++;
            continue;
        }
        ck_assert_msg(w != NULL, "%s: no default documented", rows[i].path);
        double d = json_number_value(w);
        const char *str = json_string_value(w);
        if (strcmp(p, "type") == 0)
            ck_assert_int_eq(s.optimizer.type, strcmp(str, "adamw") == 0
                                                   ? TD_OPT_ADAMW
                                                   : TD_OPT_SGD);
        else if (strcmp(p, "momentum") == 0)
            ck_assert_double_eq(s.optimizer.momentum, d);
        else if (strcmp(p, "nesterov") == 0)
            ck_assert_int_eq(s.optimizer.nesterov, json_is_true(w));
        else if (strcmp(p, "weight_decay") == 0)
            ck_assert_double_eq(s.optimizer.weight_decay, d);
        else if (strcmp(p, "betas") == 0) {
            ck_assert_double_eq(s.optimizer.betas[0],
                                json_number_value(json_array_get(w, 0)));
            ck_assert_double_eq(s.optimizer.betas[1],
                                json_number_value(json_array_get(w, 1)));
        } else if (strcmp(p, "eps") == 0)
            ck_assert_double_eq(s.optimizer.eps, d);
        else if (strcmp(p, "schedule.type") == 0)
            ck_assert_int_eq(s.optimizer.schedule.type,
                             strcmp(str, "cosine") == 0 ? TD_SCHED_COSINE
                             : strcmp(str, "step") == 0 ? TD_SCHED_STEP
                                                        : TD_SCHED_CONSTANT);
        else if (strcmp(p, "schedule.warmup_steps") == 0)
            ck_assert_int_eq(s.optimizer.schedule.warmup_steps, d);
        else if (strcmp(p, "schedule.step_size") == 0)
            ck_assert_int_eq(s.optimizer.schedule.step_size, d);
        else if (strcmp(p, "schedule.gamma") == 0)
            ck_assert_double_eq(s.optimizer.schedule.gamma, d);
        else if (strcmp(p, "schedule.min_lr") == 0)
            ck_assert_double_eq(s.optimizer.schedule.min_lr, d);
        else
            ck_abort_msg("%s: a documented optimizer field this test does "
                         "not know", rows[i].path);
        json_decref(w);
        seen++;
    }
    ck_assert_int_eq(seen, 12);
    td_spec_free(&s);
}
END_TEST

/* "required" is true: a spec without optimizer.lr is refused by name. */
START_TEST(test_lr_is_required)
{
    char err[512];
    json_t *j = json_loads("{\"model\": \"m\", \"optimizer\": {},"
                           " \"data\": {\"train\": \"/x\"}}", 0, NULL);
    td_job_spec s;
    ck_assert_int_ne(td_spec_parse(j, NULL, &s, err, sizeof err), 0);
    ck_assert_msg(strncmp(err, "optimizer.lr", 12) == 0, "%s", err);
    json_decref(j);
}
END_TEST

static Suite *doc_defaults_suite(void)
{
    Suite *s = suite_create("doc_defaults");
    TCase *tc = tcase_create("job-spec.md");
    tcase_add_test(tc, test_documented_defaults_are_applied);
    tcase_add_test(tc, test_optimizer_defaults_in_the_struct);
    tcase_add_test(tc, test_lr_is_required);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(doc_defaults_suite)
