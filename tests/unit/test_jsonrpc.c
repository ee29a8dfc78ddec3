/* SPDX-License-Identifier: Apache-2.0 */
/* JSON-RPC framing and request validation, and the policy checks applied to
 * sandbox.create params. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cleanup.h"
#include "jsonrpc.h"
#include "log.h"
#include "policy.h"
#include "textenc.h"

static int parse(const char *line, struct jsonrpc_request *req, const char **why)
{
        return jsonrpc_parse_request(line, strlen(line), req, why);
}

static void test_valid_request_parses(void **state)
{
        struct jsonrpc_request req;
        const char *why = NULL;
        assert_int_equal(
            parse("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"server.info\",\"params\":{\"a\":1}}", &req,
                  &why),
            0);
        assert_string_equal(req.method, "server.info");
        assert_int_equal(json_integer_value(req.id), 7);
        assert_int_equal(json_integer_value(json_object_get(req.params, "a")), 1);
        jsonrpc_request_clear(&req);
}

static void test_missing_params_become_empty_object(void **state)
{
        struct jsonrpc_request req;
        const char *why = NULL;
        assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"m\"}", &req, &why), 0);
        assert_true(json_is_object(req.params));
        assert_int_equal(json_object_size(req.params), 0);
        jsonrpc_request_clear(&req);
        assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":null}", &req, &why),
                         0);
        assert_true(json_is_object(req.params));
        jsonrpc_request_clear(&req);
}

static void test_bad_requests_get_the_right_code(void **state)
{
        static const struct {
                const char *line;
                int code;
        } cases[] = {
                { "{", JSONRPC_PARSE_ERROR },
                { "not json", JSONRPC_PARSE_ERROR },
                { "{\"a\":1,\"a\":2}", JSONRPC_INVALID_REQUEST },
                { "{\"a\":1,\"a\":2", JSONRPC_PARSE_ERROR },
                { "[1e400", JSONRPC_PARSE_ERROR },
                { "[1e400,]", JSONRPC_PARSE_ERROR },
                { "{\"a\\u0000\":1", JSONRPC_PARSE_ERROR },
                { "[1,2]", JSONRPC_INVALID_REQUEST },
                { "\"str\"", JSONRPC_INVALID_REQUEST },
                { "{\"id\":1,\"method\":\"m\"}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"m\"}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\",\"id\":1}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"m\"}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":[1]}", JSONRPC_INVALID_PARAMS },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":\"x\"}",
                  JSONRPC_INVALID_PARAMS },
                /* NUL inside a string is refused by validation, not the parser. */
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\\u0000x\"}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\\u0000\",\"id\":1,\"method\":\"m\"}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"p\":\"/a\\u0000b\"}}",
                  JSONRPC_INVALID_PARAMS },
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                struct jsonrpc_request req;
                const char *why = NULL;
                int code = parse(cases[i].line, &req, &why);
                if (code != cases[i].code)
                        fail_msg("%s: got %d, want %d", cases[i].line, code, cases[i].code);
                assert_non_null(why);
                jsonrpc_request_clear(&req);
        }
}

static void test_id_is_recovered_for_error_replies(void **state)
{
        struct jsonrpc_request req;
        const char *why = NULL;
        assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":42,\"params\":{}}", &req, &why),
                         JSONRPC_INVALID_REQUEST);
        assert_non_null(req.id);
        assert_int_equal(json_integer_value(req.id), 42);
        jsonrpc_request_clear(&req);
}

/* Valid JSON that jansson cannot hold as such is still answered with its
 * own id, so a pipelining client is never left waiting. */
static void test_valid_json_keeps_its_id(void **state)
{
        static const struct {
                const char *line;
                int code;
                json_int_t id;
                const char *why;
        } cases[] = {
                { "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"m\",\"params\":{\"path\":\"/a\\u0000/b\"}}",
                  JSONRPC_INVALID_PARAMS, 5, "params.path" },
                { "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"m\",\"params\":{\"argv\":[\"x\",\"\\u0000\"]}}",
                  JSONRPC_INVALID_PARAMS, 6, "params.argv[1]" },
                { "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"m\",\"params\":{\"a\":1,\"a\":2}}",
                  JSONRPC_INVALID_REQUEST, 7, "duplicate" },
                { "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"m\",\"method\":\"n\"}", JSONRPC_INVALID_REQUEST,
                  8, "duplicate" },
                { "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"m\",\"params\":{\"n\":1e400}}",
                  JSONRPC_INVALID_REQUEST, 9, "out of range" },
                { "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"m\",\"params\":{\"n\":-1e400}}",
                  JSONRPC_INVALID_REQUEST, 10, "out of range" },
                { "{\"jsonrpc\":\"2.0\",\"params\":{\"n\":99999999999999999999999},\"id\":11,\"method\":"
                  "\"m\"}",
                  JSONRPC_INVALID_REQUEST, 11, "out of range" },
                { "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"m\",\"params\":{\"k\\u0000\":1}}",
                  JSONRPC_INVALID_PARAMS, 12, "NUL" },
                { "{\"jsonrpc\":\"2.0\",\"id\":15,\"method\":\"m\",\"par\\u0000\":1}",
                  JSONRPC_INVALID_REQUEST, 15, "NUL" },
                /* both at once, in either order */
                { "{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"m\",\"params\":{\"n\":1e999,\"n\":1}}",
                  JSONRPC_INVALID_REQUEST, 13, "out of range" },
                { "{\"id\":14,\"id\":14,\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{\"n\":1e999}}",
                  JSONRPC_INVALID_REQUEST, 14, "duplicate" },
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                struct jsonrpc_request req;
                const char *why = NULL;
                int code = parse(cases[i].line, &req, &why);
                if (code != cases[i].code)
                        fail_msg("%s: got %d (%s), want %d", cases[i].line, code, why, cases[i].code);
                assert_non_null(req.id);
                assert_int_equal(json_integer_value(req.id), cases[i].id);
                if (strstr(why, cases[i].why) == NULL)
                        fail_msg("%s: message \"%s\" does not say \"%s\"", cases[i].line, why, cases[i].why);
                jsonrpc_request_clear(&req);
        }
        /* An id that cannot be held is no id: the answer carries null (as
         * JSON-RPC says for an id that cannot be detected), never 0, which
         * a client may have used for another request. */
        static const char *const unrepresentable[] = {
                "{\"jsonrpc\":\"2.0\",\"id\":1e400,\"method\":\"m\"}",
                "{\"jsonrpc\":\"2.0\",\"id\":-123456789012345678901234567890,\"method\":\"m\"}",
        };
        for (size_t i = 0; i < ARRAY_SIZE(unrepresentable); i++) {
                struct jsonrpc_request req;
                const char *why = NULL;
                assert_int_equal(parse(unrepresentable[i], &req, &why), JSONRPC_INVALID_REQUEST);
                assert_true(req.has_id);
                if (req.id != NULL && !json_is_null(req.id))
                        fail_msg("%s: answered with id %lld", unrepresentable[i],
                                 (long long)json_integer_value(req.id));
                jsonrpc_request_clear(&req);
        }
        /* Representable extremes are fine. */
        struct jsonrpc_request req;
        const char *why = NULL;
        assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"a\":"
                               "9223372036854775807,\"b\":-9223372036854775808,\"c\":1e308,\"d\":1e-400}}",
                               &req, &why),
                         0);
        jsonrpc_request_clear(&req);
}

/* Text quoted in a log line can never start a line of its own. */
static void test_log_escape_defeats_forged_lines(void **state)
{
        char out[256];
        log_escape("a\n<3>error: forged\r\x1b[2J\t\xc2\x85\xe2\x80\xa8\xff ok \xc3\xa9", out, sizeof(out));
        assert_string_equal(out,
                            "a\\x0a<3>error: forged\\x0d\\x1b[2J\\x09\\u{0085}\\u{2028}\\xff ok \xc3\xa9");
        /* Cut at the buffer, never in the middle of an escape. */
        log_escape("\n\n\n", out, 9);
        assert_string_equal(out, "\\x0a\\x0a");
}

/* A burst, then one line per second, and a count of what was dropped. */
static void test_log_limited_drops_and_counts(void **state)
{
        char path[] = "/tmp/nsbox-log-test-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        fflush(stderr);
        int saved = dup(2);
        dup2(fd, 2);
        for (int i = 0; i < 100; i++)
                log_limited("uid 4242", LOG_LEVEL_WARN, "line %d", i);
        log_limited("uid 4243", LOG_LEVEL_WARN, "another key");
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        char buf[8192] = "";
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        assert_true(n > 0);
        close(fd);
        unlink(path);
        unsigned lines = 0;
        for (char *p = buf; (p = strstr(p, "line ")) != NULL; p++)
                lines++;
        assert_int_equal(lines, LOG_LIMIT_BURST);
        assert_non_null(strstr(buf, "another key"));
}

static void test_deep_nesting_is_refused_not_crashing(void **state)
{
        size_t depth = 200000;
        char *line = malloc(depth * 2 + 1);
        memset(line, '[', depth);
        memset(line + depth, ']', depth);
        line[depth * 2] = '\0';
        struct jsonrpc_request req;
        const char *why = NULL;
        assert_int_equal(parse(line, &req, &why), JSONRPC_PARSE_ERROR);
        jsonrpc_request_clear(&req);
        free(line);
}

static void test_serialize_is_one_compact_line(void **state)
{
        json_t *id = json_integer(3), *result = json_pack("{s:s}", "text", "a\nb");
        json_t *msg = jsonrpc_result(id, result); /* both borrowed */
        json_decref(id);
        json_decref(result);
        size_t len;
        char *line = jsonrpc_serialize(msg, &len);
        assert_non_null(line);
        assert_int_equal(line[len - 1], '\n');
        assert_null(memchr(line, '\n', len - 1));
        assert_null(strchr(line, ' '));
        assert_int_equal(jsonrpc_find_newline(line, len), (ssize_t)len - 1);
        free(line);
        json_decref(msg);
}

static void test_serialize_into_a_buffer_is_the_same_line_or_nothing(void **state)
{
        json_t *msg = json_pack("{s:s, s:i, s:s}", "jsonrpc", "2.0", "id", 7, "method", "x");
        size_t len;
        char *line = jsonrpc_serialize(msg, &len);
        assert_non_null(line);
        char buf[64];
        assert_int_equal(jsonrpc_serialize_into(msg, buf, sizeof(buf)), len);
        assert_memory_equal(buf, line, len);
        /* Exactly its size fits; a byte less does not, and says so. */
        assert_int_equal(jsonrpc_serialize_into(msg, buf, len), len);
        assert_int_equal(jsonrpc_serialize_into(msg, buf, len - 1), 0);
        assert_int_equal(jsonrpc_serialize_into(msg, buf, 1), 0);
        free(line);
        json_decref(msg);
        /* A key too long for the buffer with a short value after it: jansson
         * goes on past the key it could not write; nothing is taken. */
        char key[200];
        memset(key, 'k', sizeof(key) - 1);
        key[sizeof(key) - 1] = '\0';
        msg = json_pack("{s:{s:i}}", "params", key, 1);
        assert_int_equal(jsonrpc_serialize_into(msg, buf, sizeof(buf)), 0);
        json_decref(msg);
}

static void test_error_reply_shape(void **state)
{
        json_t *msg = jsonrpc_error(NULL, JSONRPC_APP_ERROR, "not_found", "no sandbox x");
        assert_true(json_is_null(json_object_get(msg, "id")));
        json_t *error = json_object_get(msg, "error");
        assert_int_equal(json_integer_value(json_object_get(error, "code")), -32000);
        assert_string_equal(json_string_value(json_object_get(json_object_get(error, "data"), "kind")),
                            "not_found");
        json_decref(msg);
}

static void test_find_newline_on_split_input(void **state)
{
        assert_int_equal(jsonrpc_find_newline("{\"a\"", 4), -1);
        assert_int_equal(jsonrpc_find_newline("{}\n{}", 5), 2);
        assert_int_equal(jsonrpc_find_newline("", 0), -1);
}

static void test_policy_defaults_and_overrides(void **state)
{
        struct sandbox_policy defaults, p;
        _cleanup_error_ nsbox_error_t *err = NULL;
        policy_defaults(&defaults);
        json_t *params = json_pack("{s:s, s:{s:I, s:f}, s:{s:s}}", "session_id", "abc", "limits",
                                   "memory_bytes", (json_int_t)(64 << 20), "cpus", 0.5, "env", "A", "1");
        assert_int_equal(policy_from_json(&defaults, NULL, params, &p, &err), 0);
        assert_string_equal(p.session_id, "abc");
        assert_int_equal(p.limits.memory_bytes, 64 << 20);
        assert_int_equal(p.limits.pids, 256);
        assert_true(p.limits.cpus == 0.5);
        policy_clear(&p);
        json_decref(params);
}

static void test_policy_rejects_bad_params(void **state)
{
        static const char *const bad[] = {
                "{\"limits\":{\"memory_bytes\":-1}}",
                "{\"limits\":{\"memory_bytes\":\"1Q\"}}", /* a size takes K, M, G or T */
                "{\"limits\":{\"cpus\":0}}",
                "{\"limits\":{\"pids\":1e9}}",
                "{\"limits\":{\"swap\":1}}",
                "{\"limits\":[]}",
                "{\"image\":\"../etc\"}",
                "{\"image\":\".hidden\"}",
                "{\"seccomp_profile\":\"/etc/passwd\"}",
                "{\"network\":\"../host\"}",
                "{\"network\":5}",
                "{\"network\":\"custom\"}",
                "{\"env\":{\"A=B\":\"x\"}}",
                "{\"env\":{\"A\":1}}",
                "{\"env\":[\"A=1\"]}",
                "{\"labels\":{\"a\":null}}",
                "{\"session_id\":\"\"}",
                "{\"session_id\":5}",
                "{\"idle_timeout_seconds\":0}",
                "{\"memroy\":1}",
        };
        struct sandbox_policy defaults, p;
        policy_defaults(&defaults);
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                _cleanup_error_ nsbox_error_t *err = NULL;
                json_t *params = json_loads(bad[i], 0, NULL);
                assert_non_null(params);
                if (policy_from_json(&defaults, NULL, params, &p, &err) == 0)
                        fail_msg("accepted %s", bad[i]);
                assert_non_null(err);
                json_decref(params);
        }
}

static void test_utf8_repair(void **state)
{
        size_t n;
        char *s = utf8_make_valid("ok\xff\xc3\xa9\xe2\x82", 7, &n);
        assert_string_equal(s, "ok\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd");
        free(s);
        s = utf8_make_valid("\xed\xa0\x80", 3, &n); /* a surrogate is not UTF-8 */
        assert_null(strstr(s, "\xed\xa0\x80"));
        free(s);
        assert_true(utf8_valid("ok \xc3\xa9 \xe2\x82\xac", 9));
        assert_false(utf8_valid("ok\xff", 3));
        assert_false(utf8_valid("ab\xe2\x82", 4)); /* cut in the middle */
        assert_false(utf8_valid("\xed\xa0\x80", 3));
        assert_int_equal(utf8_complete_prefix("ab\xe2\x82", 4), 2);
        assert_int_equal(utf8_complete_prefix("ab\xe2\x82\xac", 5), 5);
        assert_int_equal(utf8_complete_prefix("ab\xff", 3), 3);
}

static void test_base64_round_trip(void **state)
{
        const unsigned char data[] = { 0, 1, 2, 250, 255, 'x', 0 };
        for (size_t len = 0; len <= sizeof(data); len++) {
                size_t elen, dlen;
                char *enc = base64_encode(data, len, &elen);
                unsigned char *dec = base64_decode(enc, elen, &dlen);
                assert_non_null(dec);
                assert_int_equal(dlen, len);
                assert_memory_equal(dec, data, len);
                free(enc);
                free(dec);
        }
        size_t n;
        assert_null(base64_decode("abc", 3, &n));
        assert_null(base64_decode("a=bc", 4, &n));
        assert_null(base64_decode("ab!c", 4, &n));
}

/* The check without decoding says yes exactly when decoding succeeds. */
static void test_base64_valid_agrees_with_decode(void **state)
{
        static const char *const samples[] = {
                "",         "abcd",     "ab==", "abc=", "a===", "====",  "ab=c",    "ab==abcd",
                "abcdab==", "abcdabc=", "abc",  "ab!c", "AB+/", "ab\0c", "abcda=b="
        };
        for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
                size_t n, len = strlen(samples[i]);
                void *dec = base64_decode(samples[i], len, &n);
                assert_int_equal(base64_valid(samples[i], len), dec != NULL);
                free(dec);
        }
        /* Random strings over the alphabet, padding and a few others. */
        static const char alphabet[] = "AZaz09+/=-_ \n";
        srand(1);
        for (int i = 0; i < 200000; i++) {
                char text[12];
                size_t len = (size_t)(rand() % 13);
                for (size_t k = 0; k < len; k++)
                        text[k] = alphabet[rand() % (sizeof(alphabet) - 1)];
                size_t n;
                void *dec = base64_decode(text, len, &n);
                assert_int_equal(base64_valid(text, len), dec != NULL);
                free(dec);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_valid_request_parses),
                cmocka_unit_test(test_missing_params_become_empty_object),
                cmocka_unit_test(test_bad_requests_get_the_right_code),
                cmocka_unit_test(test_id_is_recovered_for_error_replies),
                cmocka_unit_test(test_valid_json_keeps_its_id),
                cmocka_unit_test(test_log_escape_defeats_forged_lines),
                cmocka_unit_test(test_log_limited_drops_and_counts),
                cmocka_unit_test(test_deep_nesting_is_refused_not_crashing),
                cmocka_unit_test(test_serialize_is_one_compact_line),
                cmocka_unit_test(test_serialize_into_a_buffer_is_the_same_line_or_nothing),
                cmocka_unit_test(test_error_reply_shape),
                cmocka_unit_test(test_find_newline_on_split_input),
                cmocka_unit_test(test_policy_defaults_and_overrides),
                cmocka_unit_test(test_policy_rejects_bad_params),
                cmocka_unit_test(test_utf8_repair),
                cmocka_unit_test(test_base64_round_trip),
                cmocka_unit_test(test_base64_valid_agrees_with_decode),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
