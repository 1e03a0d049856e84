/* tdtest.h - the shared frame of traind's Check suites.
 *
 * Each test file builds one Suite named after the module it tests and ends
 * with TD_TEST_MAIN(that_suite).  Check runs every test in its own forked
 * process (its default; CK_FORK=no runs them in-process for a debugger), so
 * one crashing test cannot hide the others.  Per-test timeouts come from
 * CK_DEFAULT_TIMEOUT, which tests/meson.build sets.
 */
#ifndef TD_TDTEST_H
#define TD_TDTEST_H

#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Runs a shell command in folder dir; it must succeed. */
static inline void td_test_sh(const char *dir, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void td_test_sh(const char *dir, const char *fmt, ...)
{
    char cmd[8192], full[8192 + 4200];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    ck_assert_msg(n >= 0 && (size_t)n < sizeof cmd, "command too long");
    n = snprintf(full, sizeof full, "cd '%s' && %s", dir, cmd);
    ck_assert_msg(n >= 0 && (size_t)n < sizeof full, "command too long");
    int rc = system(full);
    ck_assert_msg(rc == 0, "`%s` failed (%d)", cmd, rc);
}

/* dir/rel's bytes, NUL-terminated (malloc'd), its length in *len; the
 * file must exist. */
static inline uint8_t *td_test_slurp(const char *dir, const char *rel,
                                     size_t *len)
{
    char p[4200];
    int k = snprintf(p, sizeof p, "%s/%s", dir, rel);
    ck_assert_msg(k >= 0 && (size_t)k < sizeof p, "%s: path too long", rel);
    FILE *f = fopen(p, "rb");
    ck_assert_msg(f != NULL, "%s: %s", p, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Runs cmd through the shell; its whole stdout, NUL-terminated
 * (malloc'd), and its exit status in *status (-1 when it did not exit). */
static inline char *td_test_capture(const char *cmd, int *status)
{
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "popen %s: %s", cmd, strerror(errno));
    char *out = NULL;
    size_t cap = 0;
    FILE *m = open_memstream(&out, &cap);
    ck_assert_ptr_nonnull(m);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0)
        fwrite(buf, 1, n, m);
    fclose(m);
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

/* Exit status that tells meson a test was skipped. */
#define TD_TEST_SKIP 77

/* Runs suite s; the process's exit status. */
static inline int td_test_run(Suite *s)
{
    /* A failure message quoting a command's whole output must reach the
     * log: Check cuts it at BUFSIZ (8 KiB) but by default carries at most
     * 4 KiB, past which the forked test exits with status 2 and only
     * "Message string too long" on stderr.  Not more than needed: Check
     * moves its whole read buffer for every message it reads (one per
     * ck_assert), and 1 MiB made test_pool 20x slower. */
    check_set_max_msg_size(9 * 1024);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#define TD_TEST_MAIN(suite_fn)                                               \
    int main(void) { return td_test_run(suite_fn()); }

#endif
