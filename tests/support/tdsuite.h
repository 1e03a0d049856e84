/* tdsuite.h - a Check suite built from a table of test cases.
 *
 * Owns: td_suite_from(), which creates a Suite and adds one TCase per row
 * of a td_tcase table (its name, its fixtures, its tests, in order).  It
 * never runs a test; TD_TEST_MAIN (tdtest.h) does.  The table lives in the
 * suite function (a test's TTest pointer is not a constant expression).
 */
#ifndef TD_TDSUITE_H
#define TD_TDSUITE_H

#include <check.h>

#define TD_TCASE_TESTS 8

typedef struct td_tcase {
    const char *name;
    SFun setup, teardown;   /* the checked fixture; both NULL: none */
    SFun unchecked_teardown; /* an unchecked fixture's teardown, or NULL */
    const TTest *tests[TD_TCASE_TESTS]; /* in order, NULL-terminated */
} td_tcase;

/* A Suite named name with one TCase per row of the n rows of tcs. */
static inline Suite *td_suite_from(const char *name, const td_tcase *tcs,
                                   size_t n)
{
    Suite *s = suite_create(name);
    for (size_t i = 0; i < n; i++) {
        TCase *tc = tcase_create(tcs[i].name);
        if (tcs[i].setup || tcs[i].teardown)
            tcase_add_checked_fixture(tc, tcs[i].setup, tcs[i].teardown);
        if (tcs[i].unchecked_teardown)
            tcase_add_unchecked_fixture(tc, NULL, tcs[i].unchecked_teardown);
        for (size_t k = 0; k < TD_TCASE_TESTS && tcs[i].tests[k]; k++)
            tcase_add_test(tc, tcs[i].tests[k]);
        suite_add_tcase(s, tc);
    }
    return s;
}

#endif
