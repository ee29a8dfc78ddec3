/* SPDX-License-Identifier: Apache-2.0 */
/* The request parser's answers to hostile input, and replies that must
 * always be sendable: what nsboxd relies on to answer every client. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cleanup.h"
#include "jsonrpc.h"

static int parse(const char *line, struct jsonrpc_request *req, const char **why)
{
        return jsonrpc_parse_request(line, strlen(line), req, why);
}

static void test_nul_is_invalid_params_that_says_so(void **state)
{
        struct jsonrpc_request req;
        const char *why = NULL;
        /* Valid JSON: refused by validation, with the request's id. */
        assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sandbox.exec\","
                               "\"params\":{\"argv\":[\"a\\u0000b\"]}}",
                               &req, &why),
                         JSONRPC_INVALID_PARAMS);
        assert_non_null(strstr(why, "NUL"));
        assert_int_equal(json_integer_value(req.id), 1);
        jsonrpc_request_clear(&req);
        /* A raw NUL byte inside a string is a control character: not JSON. */
        static const char raw[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\0b\"}";
        assert_int_equal(jsonrpc_parse_request(raw, sizeof(raw) - 1, &req, &why), JSONRPC_PARSE_ERROR);
        jsonrpc_request_clear(&req);
}

static void test_parse_errors_do_not_quote_the_input(void **state)
{
        struct jsonrpc_request req;
        const char *why = NULL;
        assert_int_equal(parse("{\"secret-token-xyz\" 1}", &req, &why), JSONRPC_PARSE_ERROR);
        assert_null(strstr(why, "secret"));
        assert_non_null(strstr(why, "column"));
        jsonrpc_request_clear(&req);
}

static void test_unknown_members_are_refused_by_name(void **state)
{
        struct jsonrpc_request req;
        const char *why = NULL;
        assert_int_equal(
            parse("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"sandbox.create\",\"parms\":{}}", &req, &why),
            JSONRPC_INVALID_REQUEST);
        assert_non_null(strstr(why, "\"parms\""));
        assert_int_equal(json_integer_value(req.id), 3);
        jsonrpc_request_clear(&req);
}

static void test_notifications_are_told_apart_from_null_ids(void **state)
{
        struct jsonrpc_request req;
        const char *why = NULL;
        assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"method\":\"m\"}", &req, &why), 0);
        assert_false(req.has_id);
        assert_null(req.id);
        jsonrpc_request_clear(&req);
        assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"m\"}", &req, &why), 0);
        assert_true(req.has_id);
        assert_true(json_is_null(req.id));
        jsonrpc_request_clear(&req);
        /* An id of the wrong type: a call, but its id cannot be echoed. */
        assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"m\"}", &req, &why),
                         JSONRPC_INVALID_REQUEST);
        assert_true(req.has_id);
        assert_null(req.id);
        jsonrpc_request_clear(&req);
}

static void test_deep_object_nesting_is_refused(void **state)
{
        size_t depth = 200000;
        size_t len = depth * 6 + 1;
        _cleanup_free_ char *line = malloc(len + 1);
        for (size_t i = 0; i < depth; i++)
                memcpy(line + i * 5, "{\"a\":", 5);
        line[depth * 5] = '1';
        memset(line + depth * 5 + 1, '}', depth);
        line[len] = '\0';
        struct jsonrpc_request req;
        const char *why = NULL;
        assert_int_equal(parse(line, &req, &why), JSONRPC_PARSE_ERROR);
        assert_non_null(strstr(why, "depth"));
        jsonrpc_request_clear(&req);
}

static void test_error_with_a_message_cut_mid_character_is_still_built(void **state)
{
        /* "é" is two bytes; cut after the first one. */
        json_t *msg = jsonrpc_error(NULL, JSONRPC_INVALID_PARAMS, "invalid_params", "unknown field \"\xc3");
        assert_non_null(msg);
        size_t len;
        _cleanup_free_ char *line = jsonrpc_serialize(msg, &len);
        assert_non_null(line);
        assert_non_null(strstr(line, "\xef\xbf\xbd")); /* U+FFFD */
        json_decref(msg);
}

static void test_a_large_reply_serializes_to_one_line(void **state)
{
        size_t n = 8u << 20;
        _cleanup_free_ char *big = malloc(n);
        memset(big, 'a', n);
        big[n / 2] = '\n';
        json_t *id = json_string("id"), *result = json_pack("{s:s%}", "stdout", big, n);
        json_t *msg = jsonrpc_result(id, result); /* both borrowed */
        json_decref(id);
        json_decref(result);
        size_t len;
        _cleanup_free_ char *line = jsonrpc_serialize(msg, &len);
        assert_non_null(line);
        assert_true(len > n);
        assert_int_equal(jsonrpc_find_newline(line, len), (ssize_t)len - 1);
        json_t *back = json_loadb(line, len, 0, NULL);
        assert_non_null(back);
        assert_int_equal(json_string_length(json_object_get(json_object_get(back, "result"), "stdout")), n);
        json_decref(back);
        json_decref(msg);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_nul_is_invalid_params_that_says_so),
                cmocka_unit_test(test_parse_errors_do_not_quote_the_input),
                cmocka_unit_test(test_unknown_members_are_refused_by_name),
                cmocka_unit_test(test_notifications_are_told_apart_from_null_ids),
                cmocka_unit_test(test_deep_object_nesting_is_refused),
                cmocka_unit_test(test_error_with_a_message_cut_mid_character_is_still_built),
                cmocka_unit_test(test_a_large_reply_serializes_to_one_line),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
