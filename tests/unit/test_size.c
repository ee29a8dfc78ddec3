/* SPDX-License-Identifier: Apache-2.0 */
/* size_parse and size_format: the sizes the CLI's options and nsboxd's
 * params take ("512M") and the sizes every message prints ("512 MiB"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <jansson.h>

#include "error.h"
#include "params.h"
#include "size.h"

static void test_units_are_powers_of_1024_in_every_spelling(void **state)
{
        static const struct {
                const char *text;
                uint64_t bytes;
        } cases[] = {
                { "0", 0 },
                { "1048576", 1048576 },
                { "100B", 100 },
                { "64k", 64 << 10 },
                { "64K", 64 << 10 },
                { "64KB", 64 << 10 },
                { "64KiB", 64 << 10 },
                { "64Ki", 64 << 10 },
                { "512M", 512ull << 20 },
                { "512m", 512ull << 20 },
                { "512MiB", 512ull << 20 },
                { "512 MiB", 512ull << 20 },
                { "1G", 1ull << 30 },
                { "1gb", 1ull << 30 },
                { "1.5G", 3ull << 29 },
                { "0.5K", 512 },
                { "1.3M", 1363148 },
                { "1T", 1ull << 40 },
                { "1TiB", 1ull << 40 },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                uint64_t v = 12345;
                assert_int_equal(size_parse(cases[i].text, &v), 0);
                assert_int_equal(v, cases[i].bytes);
        }
}

static void test_anything_else_is_refused(void **state)
{
        static const char *const bad[] = { "",         "M",
                                           "-1",       "-1M",
                                           "+5",       "1X",
                                           "1MM",      "1 M B x",
                                           "1e3",      "0x10",
                                           "inf",      "nan",
                                           "1..5",     "1.2.3",
                                           "1Mi B",    "9223372036854775808",
                                           "8388608T", "99999999999999999999" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                uint64_t v = 7;
                assert_int_equal(size_parse(bad[i], &v), -22);
                assert_int_equal(v, 7);
        }
        uint64_t v;
        assert_int_equal(size_parse(NULL, &v), -22);
        assert_int_equal(size_parse("9223372036854775807", &v), 0);
        assert_int_equal(size_parse("8388607T", &v), 0);
}

static void test_format_prints_whole_units_or_one_decimal(void **state)
{
        static const struct {
                uint64_t bytes;
                const char *text;
        } cases[] = {
                { 0, "0 bytes" },           { 1, "1 byte" },
                { 1023, "1023 bytes" },     { 1024, "1 KiB" },
                { 1536, "1.5 KiB" },        { 512ull << 20, "512 MiB" },
                { 1ull << 30, "1 GiB" },    { 25276502016ull, "23.5 GiB" },
                { 1ull << 40, "1 TiB" },    { (1ull << 40) - 1, "1023.9 GiB" },
                { UINT64_MAX, "15.9 EiB" },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char buf[SIZE_FORMAT_MAX];
                assert_string_equal(size_format(cases[i].bytes, buf, sizeof(buf)), cases[i].text);
        }
}

static void test_format_then_parse_gives_back_whole_units(void **state)
{
        static const uint64_t sizes[] = { 1024, 3ull << 20, 512ull << 20, 16ull << 30, 5ull << 40 };
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                char buf[SIZE_FORMAT_MAX];
                uint64_t back = 0;
                assert_int_equal(size_parse(size_format(sizes[i], buf, sizeof(buf)), &back), 0);
                assert_int_equal(back, sizes[i]);
        }
}

/* params_get_size: what nsboxd's params take and how it says a bad one. */
static void test_params_take_integers_and_strings_and_say_bounds_in_units(void **state)
{
        json_t *p = json_pack("{s:I, s:s, s:s, s:f, s:s, s:I}", "n", (json_int_t)4096, "s", "512M", "bad",
                              "lots", "real", 1.5, "small", "8M", "neg", (json_int_t)-1);
        uint64_t v = 7;
        nsbox_error_t *err = NULL;
        assert_int_equal(params_get_size(p, "n", "n", NULL, 0, 1ull << 40, &v, &err), 0);
        assert_int_equal(v, 4096);
        assert_int_equal(params_get_size(p, "s", "s", NULL, 0, 1ull << 40, &v, &err), 0);
        assert_int_equal(v, 512ull << 20);
        assert_int_equal(params_get_size(p, "absent", "absent", NULL, 0, 1, &v, &err), 0);
        assert_int_equal(v, 512ull << 20);
        static const char *const wrong[] = { "bad", "real", "neg" };
        for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
                assert_true(params_get_size(p, wrong[i], "limits.memory_bytes", "nsbox create --memory", 0,
                                            1ull << 40, &v, &err) < 0);
                assert_non_null(
                    strstr(err->message, "limits.memory_bytes (nsbox create --memory) must be a size"));
                nsbox_error_free(&err);
        }
        assert_true(params_get_size(p, "small", "limits.memory_bytes", "nsbox create --memory", 16ull << 20,
                                    1ull << 40, &v, &err) < 0);
        assert_string_equal(err->message, "limits.memory_bytes 8 MiB is out of range: from 16 MiB to 1 TiB "
                                          "(nsbox create --memory)");
        nsbox_error_free(&err);
        assert_int_equal(v, 512ull << 20);
        json_decref(p);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_units_are_powers_of_1024_in_every_spelling),
                cmocka_unit_test(test_anything_else_is_refused),
                cmocka_unit_test(test_format_prints_whole_units_or_one_decimal),
                cmocka_unit_test(test_format_then_parse_gives_back_whole_units),
                cmocka_unit_test(test_params_take_integers_and_strings_and_say_bounds_in_units),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
