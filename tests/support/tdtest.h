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
#include <stdio.h>
#include <stdlib.h>

/* Exit status that tells meson a test was skipped. */
#define TD_TEST_SKIP 77

#define TD_TEST_MAIN(suite_fn)                                               \
    int main(void)                                                           \
    {                                                                        \
        SRunner *sr = srunner_create(suite_fn());                            \
        srunner_run_all(sr, CK_NORMAL);                                      \
        int failed = srunner_ntests_failed(sr);                              \
        srunner_free(sr);                                                    \
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;                         \
    }

#endif
