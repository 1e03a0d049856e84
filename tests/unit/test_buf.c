/* test_buf.c - the growing byte buffer: growth, kept contents, reuse after
 * free, and a request no allocation can meet. */
#include <stdint.h>
#include <string.h>

#include "base/buf.h"
#include "tdtest.h"

START_TEST(test_grows_and_keeps_contents)
{
    td_buf b = {0};
    ck_assert_int_eq(td_buf_reserve(&b, 10), 0);
    ck_assert_ptr_nonnull(b.p);
    ck_assert_uint_ge(b.cap, 10);
    ck_assert_uint_eq(b.len, 0);
    for (int i = 0; i < 10; i++)
        b.p[i] = (uint8_t)(i * 7);
    b.len = 10;
    size_t cap = b.cap;
    /* Within capacity: nothing moves. */
    uint8_t *p = b.p;
    ck_assert_int_eq(td_buf_reserve(&b, cap), 0);
    ck_assert_ptr_eq(b.p, p);
    ck_assert_uint_eq(b.cap, cap);
    /* Past it: at least what was asked, at most twice that (amortised
     * growth), the bytes and the length kept. */
    size_t want = cap * 3 + 1;
    ck_assert_int_eq(td_buf_reserve(&b, want), 0);
    ck_assert_uint_ge(b.cap, want);
    ck_assert_uint_le(b.cap, 2 * want);
    ck_assert_uint_eq(b.len, 10);
    for (int i = 0; i < 10; i++)
        ck_assert_uint_eq(b.p[i], (uint8_t)(i * 7));
    memset(b.p, 0xab, b.cap); /* all of it is ours (ASan checks) */
    td_buf_free(&b);
}
END_TEST

START_TEST(test_free_leaves_a_reusable_empty_buffer)
{
    td_buf b = {0};
    ck_assert_int_eq(td_buf_reserve(&b, 100000), 0);
    b.len = 5;
    td_buf_free(&b);
    ck_assert_ptr_null(b.p);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_uint_eq(b.cap, 0);
    td_buf_free(&b); /* twice is harmless */
    ck_assert_int_eq(td_buf_reserve(&b, 1), 0);
    ck_assert_uint_ge(b.cap, 1);
    td_buf_free(&b);
}
END_TEST

START_TEST(test_impossible_size_is_enomem_not_a_hang)
{
    /* Doubling from 4096 towards SIZE_MAX would wrap to 0 and loop for
     * ever; a size no allocator can give must fail at once. */
    td_buf b = {0};
    ck_assert_int_eq(td_buf_reserve(&b, 64), 0);
    b.p[0] = 42;
    ck_assert_int_eq(td_buf_reserve(&b, SIZE_MAX), -ENOMEM);
    ck_assert_int_eq(td_buf_reserve(&b, SIZE_MAX / 2 + 2), -ENOMEM);
    /* The buffer is unchanged by the failures. */
    ck_assert_uint_ge(b.cap, 64);
    ck_assert_uint_eq(b.p[0], 42);
    td_buf_free(&b);
}
END_TEST

static Suite *buf_suite(void)
{
    Suite *s = suite_create("buf");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_grows_and_keeps_contents);
    tcase_add_test(tc, test_free_leaves_a_reusable_empty_buffer);
    tcase_add_test(tc, test_impossible_size_is_enomem_not_a_hang);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(buf_suite)
