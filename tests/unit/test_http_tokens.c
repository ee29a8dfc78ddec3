/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-http's tokens file: what it accepts, what it refuses (with the
 * reason), and lookups that find exactly one owner, never a prefix. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth.h"

/* cli/client.c's need, unused here */
int cli_write_all(int fd, const void *data, size_t len)
{
        return 0;
}

static char path[] = "/tmp/nsbox-test-tokens-XXXXXX";

static int load(const char *text, mode_t mode, nsbox_error_t **err)
{
        http_tokens_clear();
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
        assert_int_equal(chmod(path, mode), 0);
        return http_tokens_load(path, err);
}

static uid_t lookup(const char *token)
{
        return http_tokens_lookup(token, strlen(token));
}

static void test_plain_and_sha256_entries_with_comments(void **state)
{
        nsbox_error_t *err = NULL;
        /* sha256("token-c-0123456789abcdef") */
        const char *text = "# owners\n\n  41001 token-a-0123456789abcdef\n41002\ttoken-b-0123456789abcdef\r\n"
                           "41003 sha256:86162e11c5f38aedbd3ac455c70bf1e7bce9e8350f0a4e2a5ffad184e94651da\n";
        assert_int_equal(load(text, 0600, &err), 0);
        assert_int_equal(lookup("token-a-0123456789abcdef"), 41001);
        assert_int_equal(lookup("token-b-0123456789abcdef"), 41002);
        assert_int_equal(lookup("token-c-0123456789abcdef"), 41003);
        assert_int_equal(lookup("token-a-0123456789abcde"), 0);   /* a prefix */
        assert_int_equal(lookup("token-a-0123456789abcdefX"), 0); /* longer */
        assert_int_equal(lookup(""), 0);
        assert_int_equal(lookup("41001"), 0);
        assert_int_equal(lookup("sha256:86162e11c5f38aedbd3ac455c70bf1e7bce9e8350f0a4e2a5ffad184e94651da"),
                         0);
}

static void test_sha256_digits_in_either_case(void **state)
{
        nsbox_error_t *err = NULL;
        assert_int_equal(
            load("7 sha256:86162E11C5F38AEDBD3AC455C70BF1E7BCE9E8350F0A4E2A5FFAD184E94651DA\n", 0600, &err),
            0);
        assert_int_equal(lookup("token-c-0123456789abcdef"), 7);
        assert_int_equal(lookup("token-a-0123456789abcdef"), 0);
}

static void expect_refused(const char *text, mode_t mode, const char *why)
{
        nsbox_error_t *err = NULL;
        assert_true(load(text, mode, &err) < 0);
        assert_non_null(err);
        if (strstr(err->message, why) == NULL)
                fail_msg("\"%s\": wanted \"%s\" in \"%s\"", text, why, err->message);
        nsbox_error_free(&err);
}

static void test_refusals(void **state)
{
        expect_refused("0 token-a-0123456789abcdef\n", 0600, "uid");
        expect_refused("-1 token-a-0123456789abcdef\n", 0600, "uid");
        expect_refused("4294967295 token-a-0123456789abcdef\n", 0600, "uid");
        expect_refused("abc token-a-0123456789abcdef\n", 0600, "uid");
        expect_refused("5 short\n", 0600, "at least");
        expect_refused("5\n", 0600, "expected");
        expect_refused("5 a-token-of-enough-length extra\n", 0600, "expected");
        expect_refused("5 sha256:abcd\n", 0600, "64 hex");
        expect_refused("5 sha256:zz4a4a1f8c2d3ab1f6b7f1c8c1d3d0e4b5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0\n", 0600,
                       "64 hex");
        expect_refused("5 token-a-0123456789abcdef\n6 token-a-0123456789abcdef\n", 0600, "twice");
        expect_refused("# nothing\n\n", 0600, "no token");
        expect_refused("5 token-a-0123456789abcdef\n", 0622, "writable");
        expect_refused("5 token-a-0123456789abcdef\n", 0660, "writable");
        /* a refused file leaves no token behind */
        assert_int_equal(lookup("token-a-0123456789abcdef"), 0);
}

static void test_a_refused_reload_keeps_the_tokens_loaded_before(void **state)
{
        nsbox_error_t *err = NULL;
        assert_int_equal(load("5 token-a-0123456789abcdef\n", 0600, &err), 0);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs("6 token-b-0123456789abcdef\n0 token-c-0123456789abcdef\n", f);
        fclose(f);
        assert_true(http_tokens_load(path, &err) < 0);
        nsbox_error_free(&err);
        assert_int_equal(lookup("token-a-0123456789abcdef"), 5);
        assert_int_equal(lookup("token-b-0123456789abcdef"), 0);
}

int main(void)
{
        int fd = mkstemp(path);
        if (fd < 0)
                return 1;
        close(fd);
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_plain_and_sha256_entries_with_comments),
                cmocka_unit_test(test_sha256_digits_in_either_case),
                cmocka_unit_test(test_refusals),
                cmocka_unit_test(test_a_refused_reload_keeps_the_tokens_loaded_before),
        };
        int failed = cmocka_run_group_tests(tests, NULL, NULL);
        unlink(path);
        http_tokens_clear();
        return failed;
}
