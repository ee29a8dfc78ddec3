/* SPDX-License-Identifier: Apache-2.0 */
/* The secrets put into request heads (egress/inject.c): a value goes in
 * one place only (the secret's header, or the Authorization header the
 * sandbox wrote its placeholder in, for a secret without one, to the
 * secret's hosts); a placeholder anywhere else, or for another host, is
 * REFUSED wherever it hides; a head that outgrows its buffer is NOSPACE;
 * values coming back in a response are masked; and the policy side checks
 * what a client gives. */
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
        const struct inject_secret *refused = NULL;
        assert_int_equal(inject_line(s, host, in, strlen(in), true, out, sizeof(out), &n, &refused),
                         INJECT_OK);
        out[n] = '\0';
        assert_string_equal(out, want);
}

static void test_placeholders_become_values_in_the_authorization_header_only(void **state)
{
        struct inject_secrets *s = two_secrets();
        line_is(s, "c.test", "Authorization: token " PH_B, "Authorization: token value-b");
        line_is(s, "b.test", "authorization: " PH_B " " PH_B, "authorization: value-b value-b");
        line_is(s, "b.test", "X: nothing here", "X: nothing here");
        /* A prefix of a placeholder is no placeholder. */
        line_is(s, "x.test", "X: nsbox-secret-aaaa", "X: nsbox-secret-aaaa");
        inject_unref(s);
}

static void refused_is(struct inject_secrets *s, const char *host, const char *in, bool header,
                       const char *name, const char *why)
{
        char out[512], said[192];
        size_t n = 0;
        const struct inject_secret *refused = NULL;
        assert_int_equal(inject_line(s, host, in, strlen(in), header, out, sizeof(out), &n, &refused),
                         INJECT_REFUSED);
        assert_non_null(refused);
        assert_string_equal(refused->name, name);
        inject_refusal(refused, host, said, sizeof(said));
        assert_non_null(strstr(said, why));
        assert_null(strstr(said, refused->value));
}

static void test_a_placeholder_for_another_host_is_refused(void **state)
{
        struct inject_secrets *s = two_secrets();
        refused_is(s, "b.test", "X: " PH_A, true, "A", "secret A, not for this host");
        refused_is(s, "a.test", "Authorization: " PH_B, true, "B", "secret B, not for this host");
        refused_is(s, NULL, "Authorization: " PH_B, true, "B", "not for this host");
        refused_is(s, "a.test.evil", "X: " PH_A, true, "A", "not for this host");
        refused_is(s, "test", "X: " PH_A, true, "A", "not for this host");
        inject_unref(s);
}

/* A host echoes its request back (a 301's Location keeps the query,
 * Access-Control-Allow-Origin repeats Origin, a 404 page quotes the path):
 * anywhere but the one place, even to the secret's own host, the
 * placeholder is refused, never made the value. */
static void test_a_placeholder_outside_its_header_is_refused_on_its_own_host(void **state)
{
        struct inject_secrets *s = two_secrets();
        refused_is(s, "b.test", "GET /v1/" PH_B " HTTP/1.1", false, "B",
                   "secret B outside its header (Authorization)");
        refused_is(s, "b.test", "GET /?k=" PH_B " HTTP/1.1", false, "B", "outside its header");
        refused_is(s, "b.test", "Origin: " PH_B, true, "B", "outside its header (Authorization)");
        refused_is(s, "c.test", "X-Token: tok " PH_B, true, "B", "outside its header");
        /* Not even a header line that looks like Authorization from afar. */
        refused_is(s, "b.test", "Authorization-X: " PH_B, true, "B", "outside its header");
        refused_is(s, "b.test", "X: Authorization: " PH_B, true, "B", "outside its header");
        /* A secret with a header of its own is put there, never in the sandbox's text. */
        refused_is(s, "a.test", "Authorization: Bearer " PH_A, true, "A",
                   "outside its header (Authorization)");
        refused_is(s, "a.test", "X: " PH_A, true, "A", "outside its header (Authorization)");
        /* The request line is no header, whatever it says. */
        refused_is(s, "b.test", "Authorization: " PH_B, false, "B", "outside its header");
        inject_unref(s);
}

static void rewrite(struct inject_secrets *s, const char *host, const char *head, enum inject_result want,
                    const char *want_out)
{
        struct sniff_http h;
        assert_int_equal(sniff_http_head(head, strlen(head), &h), SNIFF_OK);
        char out[1024];
        size_t n = 0;
        const struct inject_secret *refused = NULL;
        assert_int_equal(inject_rewrite_head(s, host, head, &h, true, out, sizeof(out) - 1, &n, &refused),
                         want);
        if (want_out != NULL) {
                out[n] = '\0';
                assert_string_equal(out, want_out);
        }
}

static void test_a_rewritten_head_has_the_value_in_one_place(void **state)
{
        struct inject_secrets *s = two_secrets();
        rewrite(s, "a.test",
                "GET /x HTTP/1.1\r\nHost: a.test\r\nAuthorization: Bearer " PH_A "\r\nAccept: */*\r\n\r\n",
                INJECT_OK,
                "GET /x HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\nAuthorization: Bearer va\r\n\r\n");
        rewrite(s, "b.test", "GET /x HTTP/1.1\r\nHost: b.test\r\nAuthorization: token " PH_B "\r\n\r\n",
                INJECT_OK, "GET /x HTTP/1.1\r\nHost: b.test\r\nAuthorization: token value-b\r\n\r\n");
        rewrite(s, "b.test", "GET /x?t=" PH_B " HTTP/1.1\r\nHost: b.test\r\n\r\n", INJECT_REFUSED, NULL);
        rewrite(s, "b.test", "GET /x HTTP/1.1\r\nHost: b.test\r\nOrigin: " PH_B "\r\n\r\n", INJECT_REFUSED,
                NULL);
        rewrite(s, "a.test", "GET /x HTTP/1.1\r\nHost: a.test\r\nReferer: /" PH_A "\r\n\r\n", INJECT_REFUSED,
                NULL);
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
        const struct inject_secret *refused = NULL;
        const char *in = "Authorization: " PH_B;
        assert_int_equal(inject_line(s, "b.test", in, strlen(in), true, out, sizeof(out), &n, &refused),
                         INJECT_NOSPACE);
        inject_unref(s);
}

/* The body is searched piece by piece: a placeholder split at any point
 * between two pieces, or between many one-byte pieces, is found, whatever
 * the body's host: a body is no place for a value. */
static void test_a_body_placeholder_is_found_across_pieces(void **state)
{
        struct inject_secrets *s = two_secrets();
        const char body[] = "x=1&k=" PH_A "&y=2";
        for (size_t cut = 0; cut <= sizeof(body) - 1; cut++) {
                struct inject_scan scan = { 0 };
                const struct inject_secret *hit = inject_scan_body(s, &scan, body, cut);
                if (hit == NULL)
                        hit = inject_scan_body(s, &scan, body + cut, sizeof(body) - 1 - cut);
                assert_non_null(hit);
                assert_string_equal(hit->name, "A");
        }
        struct inject_scan scan = { 0 };
        const struct inject_secret *hit = NULL;
        for (size_t i = 0; i < sizeof(body) - 1 && hit == NULL; i++)
                hit = inject_scan_body(s, &scan, body + i, 1);
        assert_non_null(hit);
        /* A prefix of a placeholder at the end is no placeholder yet. */
        memset(&scan, 0, sizeof(scan));
        assert_null(inject_scan_body(s, &scan, "abc nsbox-secret-aaaa", 21));
        inject_unref(s);
}

/* A chunked body's framing between the halves of a placeholder (a chunk
 * boundary at every point of it) does not hide it; the same chunks with no
 * placeholder pass whole, fed in one piece or byte by byte. */
static void test_a_placeholder_split_by_the_chunk_framing_is_found(void **state)
{
        struct inject_secrets *s = two_secrets();
        const char ph[] = PH_A;
        for (size_t cut = 1; cut < sizeof(ph) - 1; cut++) {
                char body[256];
                int len = snprintf(body, sizeof(body), "%zx;ext=1\r\nk=%.*s\r\n%zx\r\n%s\r\n0\r\n\r\n",
                                   cut + 2, (int)cut, ph, sizeof(ph) - 1 - cut, ph + cut);
                for (size_t step = 1; step <= (size_t)len; step += (size_t)len - 1) {
                        struct sniff_chunked chunks = { 0 };
                        struct inject_scan data = { 0 };
                        const struct inject_secret *hit = NULL;
                        size_t taken = 0;
                        for (size_t i = 0; i < (size_t)len; i += step)
                                taken += inject_scan_chunked(s, &chunks, &data, (const uint8_t *)body + i,
                                                             (size_t)len - i < step ? (size_t)len - i : step,
                                                             &hit);
                        assert_non_null(hit);
                        assert_string_equal(hit->name, "A");
                        assert_int_equal(taken, len);
                        assert_int_equal(chunks.state, SNIFF_CHUNK_DONE);
                }
        }
        const char clean[] = "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\nNEXT";
        struct sniff_chunked chunks = { 0 };
        struct inject_scan data = { 0 };
        const struct inject_secret *hit = NULL;
        assert_int_equal(
            inject_scan_chunked(s, &chunks, &data, (const uint8_t *)clean, sizeof(clean) - 1, &hit),
            sizeof(clean) - 1 - 4);
        assert_null(hit);
        assert_int_equal(chunks.state, SNIFF_CHUNK_DONE);
        inject_unref(s);
}

#define VALUE_C "ghp_0123456789abcdef"

static struct inject_secrets *masked_secrets(void)
{
        json_t *j = json_loads(
            "{\"C\": {\"value\": \"" VALUE_C "\", \"hosts\": [\"c.test\"], \"placeholder\": \"" PH_A
            "\"}, \"S\": {\"value\": \"short\", \"hosts\": [\"c.test\"], \"placeholder\": \"" PH_B "\"}}",
            0, NULL);
        assert_non_null(j);
        const char *why = NULL;
        struct inject_secrets *s = inject_parse(j, &why);
        json_decref(j);
        assert_non_null(s);
        return s;
}

/* A value that comes back in a response head becomes its placeholder
 * again; one shorter than INJECT_MASK_MIN is left (found anywhere by
 * chance). */
static void test_a_value_in_a_response_head_becomes_its_placeholder(void **state)
{
        struct inject_secrets *s = masked_secrets();
        const char head[] =
            "HTTP/1.1 301 Moved\r\nLocation: /v1/" VALUE_C "?again=" VALUE_C "\r\nX-Short: short\r\n\r\n";
        char out[512];
        size_t n = 0;
        assert_int_equal(inject_mask_head(s, head, sizeof(head) - 1, out, sizeof(out) - 1, &n), INJECT_OK);
        out[n] = '\0';
        assert_string_equal(out, "HTTP/1.1 301 Moved\r\nLocation: /v1/" PH_A "?again=" PH_A
                                 "\r\nX-Short: short\r\n\r\n");
        n = 0;
        assert_int_equal(inject_mask_head(s, head, sizeof(head) - 1, out, 40, &n), INJECT_NOSPACE);
        inject_unref(s);
}

/* In a body (whose length its head gave) a value's bytes become '*', found
 * however the body is cut into pieces: the end of a piece that could begin
 * a value is held back and put before the next. */
static void test_a_value_in_a_response_body_is_masked_across_pieces(void **state)
{
        struct inject_secrets *s = masked_secrets();
        const char body[] = "{\"headers\": {\"Authorization\": \"token " VALUE_C "\"}, \"x\": \"short\"}";
        char want[sizeof(body)];
        memcpy(want, body, sizeof(body));
        memset(strstr(want, VALUE_C), '*', strlen(VALUE_C));
        for (size_t cut = 0; cut <= sizeof(body) - 1; cut++) {
                char work[2 * sizeof(body)], got[2 * sizeof(body)];
                size_t got_len = 0;
                memcpy(work, body, cut);
                size_t hold = inject_mask_body(s, work, cut);
                assert_true(hold < strlen(VALUE_C));
                memcpy(got, work, cut - hold);
                got_len = cut - hold;
                memmove(work, work + cut - hold, hold);
                memcpy(work + hold, body + cut, sizeof(body) - 1 - cut);
                size_t total = hold + sizeof(body) - 1 - cut;
                inject_mask_body(s, work, total);
                memcpy(got + got_len, work, total); /* the end: all of it goes */
                got_len += total;
                got[got_len] = '\0';
                assert_string_equal(got, want);
        }
        /* Nothing that could begin a value: nothing held. */
        char plain[] = "no value here";
        assert_int_equal(inject_mask_body(s, plain, strlen(plain)), 0);
        char tail[] = "text ghp_01";
        assert_int_equal(inject_mask_body(s, tail, strlen(tail)), 6);
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
                cmocka_unit_test(test_placeholders_become_values_in_the_authorization_header_only),
                cmocka_unit_test(test_a_placeholder_for_another_host_is_refused),
                cmocka_unit_test(test_a_placeholder_outside_its_header_is_refused_on_its_own_host),
                cmocka_unit_test(test_a_rewritten_head_has_the_value_in_one_place),
                cmocka_unit_test(test_the_secrets_header_replaces_the_sandboxs),
                cmocka_unit_test(test_a_full_buffer_is_nospace),
                cmocka_unit_test(test_a_body_placeholder_is_found_across_pieces),
                cmocka_unit_test(test_a_placeholder_split_by_the_chunk_framing_is_found),
                cmocka_unit_test(test_a_value_in_a_response_head_becomes_its_placeholder),
                cmocka_unit_test(test_a_value_in_a_response_body_is_masked_across_pieces),
                cmocka_unit_test(test_malformed_messages_are_refused),
                cmocka_unit_test(test_client_secrets_are_checked_and_get_fresh_placeholders),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
