/* test_log.c - log line format, levels, sink, journal style, threads. */
#include <errno.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/log.h"
#include "tdtest.h"

__attribute__((format(printf, 5, 6))) static int
fmt(char *buf, int cap, int level, long job, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = td_log_format(buf, cap, level, job, f, ap);
    va_end(ap);
    return n;
}

static int matches(const char *re, const char *s)
{
    regex_t r;
    ck_assert_int_eq(regcomp(&r, re, REG_EXTENDED | REG_NOSUB), 0);
    int ok = regexec(&r, s, 0, NULL, 0) == 0;
    regfree(&r);
    return ok;
}

START_TEST(test_human_format)
{
    char buf[256];
    td_log_set_thread_name("trainer");
    int n = fmt(buf, sizeof buf, TD_LOG_WARN, 7, "loss %.2f", 1.5);
    ck_assert_int_eq(n, (int)strlen(buf));
    ck_assert_msg(matches("^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8}\\.[0-9]{3} "
                          "WARN  \\[trainer\\] job 7: loss 1\\.50$", buf),
                  "got '%s'", buf);
    fmt(buf, sizeof buf, TD_LOG_INFO, 0, "no job");
    ck_assert_msg(matches("INFO  \\[trainer\\] no job$", buf), "got '%s'", buf);
}
END_TEST

START_TEST(test_journal_format)
{
    char buf[256];
    td_log_set_style(TD_LOG_STYLE_JOURNAL);
    td_log_set_thread_name("loop");
    fmt(buf, sizeof buf, TD_LOG_ERROR, 12, "disk full");
    ck_assert_str_eq(buf, "<3>[loop] job 12: disk full");
    fmt(buf, sizeof buf, TD_LOG_DEBUG, 0, "x");
    ck_assert_str_eq(buf, "<7>[loop] x");
}
END_TEST

START_TEST(test_truncation_and_newlines)
{
    char buf[64];
    char big[500];
    td_log_set_style(TD_LOG_STYLE_JOURNAL);
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    int n = fmt(buf, sizeof buf, TD_LOG_INFO, 0, "%s", big);
    ck_assert_int_eq(n, (int)sizeof buf - 1);
    ck_assert_str_eq(buf + n - 3, "...");
    fmt(buf, sizeof buf, TD_LOG_INFO, 0, "two\nlines\r");
    ck_assert_ptr_null(strchr(buf, '\n'));
    ck_assert_ptr_null(strchr(buf, '\r'));
}
END_TEST

/* A line goes into JSON (log events, trainctl logs): bytes that are not
 * UTF-8 (a Latin-1 file name) made it vanish from both; now each is
 * \xNN, valid UTF-8 stays as it is, and a cut never splits a sequence. */
START_TEST(test_lines_are_utf8)
{
    char buf[256];
    td_log_set_style(TD_LOG_STYLE_JOURNAL);
    fmt(buf, sizeof buf, TD_LOG_WARN, 3, "bad sample %s: %s",
        "train/caf\xe9.jpg", "caf\xc3\xa9 \xe2\x82\xac ok");
    ck_assert_msg(strstr(buf, "job 3: bad sample train/caf\\xe9.jpg: "
                              "caf\xc3\xa9 \xe2\x82\xac ok"), "%s", buf);
    json_t *j = json_string(buf);
    ck_assert_ptr_nonnull(j);
    json_decref(j);
    /* a lone continuation byte, a truncated sequence, an overlong '/', a
     * surrogate */
    fmt(buf, sizeof buf, TD_LOG_INFO, 0, "%s", "a\x80" "b\xe2\x82 c\xc0\xaf "
        "\xed\xa0\x80");
    ck_assert_msg(strstr(buf, "a\\x80b\\xe2\\x82 c\\xc0\\xaf "
                              "\\xed\\xa0\\x80"), "%s", buf);
    /* cut where escaping no longer fits: valid, ending in "..." */
    char small[40], bad[64];
    memset(bad, 0xe9, sizeof bad - 1);
    bad[sizeof bad - 1] = '\0';
    int n = fmt(small, sizeof small, TD_LOG_INFO, 0, "%s", bad);
    ck_assert_int_le(n, (int)sizeof small - 1);
    ck_assert_int_eq((int)strlen(small), n);
    ck_assert_str_eq(small + n - 3, "...");
    j = json_string(small);
    ck_assert_ptr_nonnull(j);
    json_decref(j);
    /* a multi-byte sequence cut by the line's own limit */
    char euro[200] = "";
    for (int i = 0; i < 60; i++)
        strcat(euro, "\xe2\x82\xac");
    n = fmt(small, sizeof small, TD_LOG_INFO, 0, "%s", euro);
    j = json_string(small);
    ck_assert_msg(j != NULL, "not UTF-8: %s", small);
    json_decref(j);
    td_log_set_style(TD_LOG_STYLE_HUMAN);
}
END_TEST

START_TEST(test_parse_level)
{
    int l = 0;
    ck_assert_int_eq(td_log_parse_level("debug", &l), 0);
    ck_assert_int_eq(l, TD_LOG_DEBUG);
    ck_assert_int_eq(td_log_parse_level("WARNING", &l), 0);
    ck_assert_int_eq(l, TD_LOG_WARN);
    ck_assert_int_eq(td_log_parse_level("loud", &l), -EINVAL);
    ck_assert_str_eq(td_log_level_name(TD_LOG_ERROR), "ERROR");
}
END_TEST

/* ---- sink and filtering ------------------------------------------------ */

static pthread_mutex_t sink_mu = PTHREAD_MUTEX_INITIALIZER;
static int sink_calls;
static long sink_job;
static char sink_last[TD_LOG_LINE_MAX];

static void sink(void *user, int level, long job, const char *line)
{
    (void)user;
    (void)level;
    pthread_mutex_lock(&sink_mu);
    sink_calls++;
    sink_job = job;
    snprintf(sink_last, sizeof sink_last, "%s", line);
    pthread_mutex_unlock(&sink_mu);
}

START_TEST(test_level_filter_and_sink)
{
    td_log_set_style(TD_LOG_STYLE_JOURNAL);
    td_log_set_sink(sink, NULL);
    td_log_set_level(TD_LOG_INFO);
    td_debug("hidden %d", 1);
    ck_assert_int_eq(sink_calls, 0);
    td_logf(TD_LOG_INFO, 3, "shown %d", 2);
    ck_assert_int_eq(sink_calls, 1);
    ck_assert_int_eq(sink_job, 3);
    ck_assert_str_eq(sink_last, "<6>[main] job 3: shown 2");
    td_log_set_level(TD_LOG_DEBUG);
    td_debug("now shown");
    ck_assert_int_eq(sink_calls, 2);
    td_log_set_sink(NULL, NULL);
    td_error("no sink");
    ck_assert_int_eq(sink_calls, 2);
}
END_TEST

static void *log_many(void *arg)
{
    char name[16];
    snprintf(name, sizeof name, "worker%d", (int)(intptr_t)arg);
    td_log_set_thread_name(name);
    for (int i = 0; i < 200; i++)
        td_info("message %d", i);
    return NULL;
}

START_TEST(test_threads_name_lines)
{
    int p[2];
    pthread_t t[4];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_ne(dup2(p[1], STDERR_FILENO), -1);
    td_log_set_style(TD_LOG_STYLE_JOURNAL);
    td_log_set_sink(sink, NULL);
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, log_many, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(sink_calls, 800);
    close(p[1]);
    close(STDERR_FILENO);
    /* Every line is whole: "<6>[workerN] message K". */
    FILE *f = fdopen(p[0], "r");
    char line[256];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        ck_assert_msg(matches("^<6>\\[worker[0-3]\\] message [0-9]+\n$", line),
                      "torn line '%s'", line);
        lines++;
    }
    ck_assert_int_eq(lines, 800);
    fclose(f);
}
END_TEST

static Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("format");
    tcase_add_test(tc, test_human_format);
    tcase_add_test(tc, test_journal_format);
    tcase_add_test(tc, test_truncation_and_newlines);
    tcase_add_test(tc, test_lines_are_utf8);
    tcase_add_test(tc, test_parse_level);
    suite_add_tcase(s, tc);
    tc = tcase_create("output");
    tcase_add_test(tc, test_level_filter_and_sink);
    tcase_add_test(tc, test_threads_name_lines);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(log_suite)
