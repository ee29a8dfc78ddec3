/* SPDX-License-Identifier: Apache-2.0 */
/* relpath_ok: the one check of client paths under /workspace that nsbox-http's
 * /execute files (flags 0) and /upload names (RELPATH_ABSOLUTE | RELPATH_LOOSE) share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "relpath.h"

#define EXECUTE 0u
#define UPLOAD  (RELPATH_ABSOLUTE | RELPATH_LOOSE)

static void test_good_paths_pass_both(void **state)
{
        static const char *const good[] = { "a",   "a.txt",     "data/in.csv", "a/b/c/d.bin", "..a",
                                            "a..", ".hidden/x", "a/...",       "sp ace/é.txt" };
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
                assert_true(relpath_ok(good[i], EXECUTE));
                assert_true(relpath_ok(good[i], UPLOAD));
        }
}

static void test_empty_dotdot_and_control_characters_fail_both(void **state)
{
        static const char *const bad[] = { "",     "..",    "../x", "a/../b", "a/..",    "/a/../b",
                                           "a\nb", "a/\tb", "\x01", "a\x7f",  "a/b\x1f", "//..//" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_false(relpath_ok(bad[i], EXECUTE));
                assert_false(relpath_ok(bad[i], UPLOAD));
        }
        assert_false(relpath_ok(NULL, EXECUTE));
        assert_false(relpath_ok(NULL, UPLOAD));
}

/* What /upload takes and /execute does not: the difference kept from before
 * the two shared a checker. */
static void test_absolute_empty_and_dot_parts_only_with_flags(void **state)
{
        static const char *const loose[] = { "/abs", "/", "./a", "a//b", "a/", "a/./b", "//a" };
        for (size_t i = 0; i < sizeof(loose) / sizeof(loose[0]); i++) {
                assert_false(relpath_ok(loose[i], EXECUTE));
                assert_true(relpath_ok(loose[i], UPLOAD));
        }
        assert_false(relpath_ok("/abs", RELPATH_LOOSE));
        assert_true(relpath_ok("/abs", RELPATH_ABSOLUTE));
        assert_false(relpath_ok("/abs//b", RELPATH_ABSOLUTE));
        assert_false(relpath_ok("./a", RELPATH_ABSOLUTE));
        assert_true(relpath_ok("./a", RELPATH_LOOSE));
}

static void test_length_limit_is_4096_bytes(void **state)
{
        char *path = malloc(RELPATH_MAX + 2);
        assert_non_null(path);
        memset(path, 'a', RELPATH_MAX + 1);
        for (size_t i = 100; i < RELPATH_MAX; i += 100)
                path[i] = '/';
        path[RELPATH_MAX + 1] = '\0'; /* 4097 bytes */
        assert_false(relpath_ok(path, EXECUTE));
        assert_false(relpath_ok(path, UPLOAD));
        path[RELPATH_MAX] = '\0'; /* 4096 bytes */
        assert_true(relpath_ok(path, EXECUTE));
        assert_true(relpath_ok(path, UPLOAD));
        free(path);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_good_paths_pass_both),
                cmocka_unit_test(test_empty_dotdot_and_control_characters_fail_both),
                cmocka_unit_test(test_absolute_empty_and_dot_parts_only_with_flags),
                cmocka_unit_test(test_length_limit_is_4096_bytes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
