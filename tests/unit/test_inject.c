/* SPDX-License-Identifier: Apache-2.0 */
/* The secrets put into request heads (egress/inject.c): a placeholder
 * becomes the value for the secret's hosts only, one for another host is
 * FOREIGN wherever it hides in the line, a secret's header replaces the
 * sandbox's, a head that outgrows its buffer is NOSPACE, and the policy
 * side checks what a client gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "inject.h"
#include "secrets.h"

#define PH_A "nsbox-secret-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define PH_B "nsbox-secret-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static struct inject_secrets *two_secrets(void)
{
        json_error_t jerr;
        json_t *j =
            json_loads("{\"A\": {\"value\": \"va\", \"hosts\": [\"a.test\"], \"placeholder\": \"" PH_A "\","
                       " \"header\": \"Authorization: Bearer {value}\"},"
                       " \"B\": {\"value\": \"value-b\", \"hosts\": [\"b.test\", \"c.test\"],"
                       " \"placeholder\": \"" PH_B "\"}}",
                       0, &jerr);
        assert_non_null(j);
        const char *why = NULL;
        struct inject_secrets *s = inject_parse(j, &why);
        json_decref(j);
        assert_null(why);
        assert_non_null(s);
        return s;
}

static void line_is(struct inject_secrets *s, const char *host, const char *in, const char *want)
{
        char out[512];
        size_t n = 0;
        const struct inject_secret *foreign = NULL;
        assert_int_equal(inject_line(s, host, in, strlen(in), out, sizeof(out), &n, &foreign), INJECT_OK);
        out[n] = '\0';
        assert_string_equal(out, want);
}

static void test_placeholders_become_values_for_their_hosts(void **state)
{
        struct inject_secrets *s = two_secrets();
        line_is(s, "a.test", "X: " PH_A, "X: va");
        line_is(s, "c.test", "GET /?k=" PH_B "&again=" PH_B " HTTP/1.1",
                "GET /?k=value-b&again=value-b HTTP/1.1");
        line_is(s, "b.test", "X: nothing here", "X: nothing here");
        /* A prefix of a placeholder is no placeholder. */
        line_is(s, "x.test", "X: nsbox-secret-aaaa", "X: nsbox-secret-aaaa");
        inject_unref(s);
}

static void test_a_placeholder_for_another_host_is_foreign(void **state)
{
        struct inject_secrets *s = two_secrets();
        const char *cases[][2] = { { "b.test", "X: " PH_A },
                                   { "a.test", "X: va " PH_B },
                                   { NULL, "X: " PH_A },
                                   { "a.test.evil", "X: " PH_A },
                                   { "test", "X: " PH_A } };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char out[512];
                size_t n = 0;
                const struct inject_secret *foreign = NULL;
                const char *in = cases[i][1];
                assert_int_equal(inject_line(s, cases[i][0], in, strlen(in), out, sizeof(out), &n, &foreign),
                                 INJECT_FOREIGN);
                assert_non_null(foreign);
        }
        inject_unref(s);
}

static void test_the_secrets_header_replaces_the_sandboxs(void **state)
{
        struct inject_secrets *s = two_secrets();
        assert_true(inject_header_replaced(s, "a.test", "authorization: Basic x", 22));
        assert_false(inject_header_replaced(s, "b.test", "Authorization: Basic x", 22));
        assert_false(inject_header_replaced(s, "a.test", "Authorization-X: y", 18));
        char out[256];
        size_t n = 0;
        assert_int_equal(inject_headers(s, "a.test", out, sizeof(out), &n), INJECT_OK);
        out[n] = '\0';
        assert_string_equal(out, "Authorization: Bearer va\r\n");
        n = 0;
        assert_int_equal(inject_headers(s, "b.test", out, sizeof(out), &n), INJECT_OK);
        assert_int_equal(n, 0);
        inject_unref(s);
}

static void test_a_full_buffer_is_nospace(void **state)
{
        struct inject_secrets *s = two_secrets();
        char out[8];
        size_t n = 0;
        const struct inject_secret *foreign = NULL;
        const char *in = "X: " PH_B;
        assert_int_equal(inject_line(s, "b.test", in, strlen(in), out, sizeof(out), &n, &foreign),
                         INJECT_NOSPACE);
        inject_unref(s);
}

/* The body is searched piece by piece: a placeholder split at any point
 * between two pieces, or between many one-byte pieces, is found; one for
 * the body's own host is not foreign. */
static void test_a_body_placeholder_is_found_across_pieces(void **state)
{
        struct inject_secrets *s = two_secrets();
        const char body[] = "x=1&k=" PH_A "&y=2";
        for (size_t cut = 0; cut <= sizeof(body) - 1; cut++) {
                struct inject_scan scan = { 0 };
                const struct inject_secret *hit = inject_scan_body(s, "b.test", &scan, body, cut);
                if (hit == NULL)
                        hit = inject_scan_body(s, "b.test", &scan, body + cut, sizeof(body) - 1 - cut);
                assert_non_null(hit);
                assert_string_equal(hit->name, "A");
        }
        struct inject_scan scan = { 0 };
        const struct inject_secret *hit = NULL;
        for (size_t i = 0; i < sizeof(body) - 1 && hit == NULL; i++)
                hit = inject_scan_body(s, NULL, &scan, body + i, 1);
        assert_non_null(hit);
        memset(&scan, 0, sizeof(scan));
        assert_null(inject_scan_body(s, "a.test", &scan, body, sizeof(body) - 1));
        /* A prefix of a placeholder at the end is no placeholder yet. */
        memset(&scan, 0, sizeof(scan));
        assert_null(inject_scan_body(s, "c.test", &scan, "abc nsbox-secret-aaaa", 21));
        inject_unref(s);
}

static void test_malformed_messages_are_refused(void **state)
{
        const char *bad[] = { "[]", "{\"A\": 1}", "{\"A\": {\"value\": \"v\", \"hosts\": [\"a\"]}}",
                              "{\"A\": {\"value\": \"v\", \"hosts\": [1], \"placeholder\": \"" PH_A "\"}}" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                json_t *j = json_loads(bad[i], 0, NULL);
                const char *why = NULL;
                assert_null(inject_parse(j, &why));
                assert_non_null(why);
                json_decref(j);
        }
        const char *why = "x";
        assert_null(inject_parse(NULL, &why));
        assert_null(why);
}

static void test_client_secrets_are_checked_and_get_fresh_placeholders(void **state)
{
        json_t *in = json_loads("{\"TOKEN\": {\"value\": \"v\", \"hosts\": [\"API.Example.com\"]}}", 0, NULL);
        json_t *one = NULL, *two = NULL, *env = NULL;
        assert_int_equal(policy_secrets_from_json(in, &one, NULL), 0);
        assert_int_equal(policy_secrets_from_json(in, &two, NULL), 0);
        const char *p1 = json_string_value(json_object_get(json_object_get(one, "TOKEN"), "placeholder"));
        const char *p2 = json_string_value(json_object_get(json_object_get(two, "TOKEN"), "placeholder"));
        assert_int_equal(strlen(p1), strlen(POLICY_SECRET_PLACEHOLDER) + 32);
        assert_string_not_equal(p1, p2);
        assert_string_equal(
            json_string_value(json_array_get(json_object_get(json_object_get(one, "TOKEN"), "hosts"), 0)),
            "api.example.com");
        assert_int_equal(policy_secrets_env(one, &env, NULL), 0);
        assert_string_equal(json_string_value(json_object_get(env, "NSBOX_SECRET_TOKEN")), p1);
        /* Replacing keeps a name's placeholder. */
        assert_int_equal(policy_secrets_replace(two, one, &env, NULL), 0);
        assert_string_equal(json_string_value(json_object_get(env, "NSBOX_SECRET_TOKEN")), p1);
        json_decref(in);
        json_decref(one);
        json_decref(two);
        json_decref(env);
        const char *bad[] = {
                "{\"a-b\": {\"value\": \"v\", \"hosts\": [\"h\"]}}",
                "{\"A\": {\"value\": \"v\\nX\", \"hosts\": [\"h\"]}}",
                "{\"A\": {\"value\": \"v\", \"hosts\": [\"1.2.3.4\"]}}",
                "{\"A\": {\"value\": \"v\", \"hosts\": [\"h\"], \"header\": \"X: {value}{value}\"}}",
                "{\"A\": {\"value\": \"v\", \"hosts\": [\"h\"], \"header\": \"{value}: x\"}}"
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                json_t *j = json_loads(bad[i], 0, NULL);
                json_t *out = NULL;
                assert_non_null(j);
                assert_true(policy_secrets_from_json(j, &out, NULL) < 0);
                assert_null(out);
                json_decref(j);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_placeholders_become_values_for_their_hosts),
                cmocka_unit_test(test_a_placeholder_for_another_host_is_foreign),
                cmocka_unit_test(test_the_secrets_header_replaces_the_sandboxs),
                cmocka_unit_test(test_a_full_buffer_is_nospace),
                cmocka_unit_test(test_a_body_placeholder_is_found_across_pieces),
                cmocka_unit_test(test_malformed_messages_are_refused),
                cmocka_unit_test(test_client_secrets_are_checked_and_get_fresh_placeholders),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
