/* SPDX-License-Identifier: Apache-2.0 */
/* The MCP message handling of nsbox mcp, without a daemon: framing,
 * malformed lines, version negotiation, the tool table, argument checks,
 * tool arguments → nsboxd params and nsboxd results → MCP content. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

/* cli/ is not part of libnsbox.a. */
#include "../../cli/mcp_protocol.c"

/* --- helpers ------------------------------------------------------------------- */

static void handle(struct mcp_state *st, const char *line, struct mcp_action *a)
{
        mcp_handle_line(st, line, strlen(line), a);
}

/* The reply to `line`, which must be one (new reference). */
static json_t *reply_to(struct mcp_state *st, const char *line)
{
        struct mcp_action a;
        handle(st, line, &a);
        assert_int_equal(a.kind, MCP_ACTION_REPLY);
        json_t *reply = json_incref(a.reply);
        mcp_action_clear(&a);
        assert_string_equal(json_string_value(json_object_get(reply, "jsonrpc")), "2.0");
        return reply;
}

static int error_code(const json_t *reply)
{
        json_t *error = json_object_get(reply, "error");
        assert_non_null(error);
        assert_true(json_is_string(json_object_get(error, "message")));
        return (int)json_integer_value(json_object_get(error, "code"));
}

static const char *text_of(const json_t *call_result)
{
        json_t *first = json_array_get(json_object_get(call_result, "content"), 0);
        assert_string_equal(json_string_value(json_object_get(first, "type")), "text");
        return json_string_value(json_object_get(first, "text"));
}

static json_t *load(const char *text)
{
        json_error_t jerr;
        json_t *v = json_loads(text, 0, &jerr);
        if (v == NULL)
                fail_msg("bad test JSON: %s", jerr.text);
        return v;
}

/* --- version negotiation and the lifecycle --------------------------------------- */

static void test_supported_versions_are_echoed_and_others_get_the_latest(void **state)
{
        const char *supported[] = { "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25" };
        for (size_t i = 0; i < ARRAY_SIZE(supported); i++)
                assert_string_equal(mcp_negotiate_version(supported[i]), supported[i]);
        assert_string_equal(mcp_negotiate_version("2024-10-07"), "2025-11-25");
        assert_string_equal(mcp_negotiate_version("2099-01-01"), "2025-11-25");
        assert_string_equal(mcp_negotiate_version(""), "2025-11-25");
        assert_string_equal(mcp_negotiate_version(NULL), "2025-11-25");
}

static void test_initialize_negotiates_and_describes_the_server(void **state)
{
        struct mcp_state st = { 0 };
        _cleanup_json_ json_t *r = reply_to(
            &st, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                 "\"2025-03-26\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}");
        assert_int_equal(json_integer_value(json_object_get(r, "id")), 0);
        json_t *result = json_object_get(r, "result");
        assert_string_equal(json_string_value(json_object_get(result, "protocolVersion")), "2025-03-26");
        assert_string_equal(st.protocol_version, "2025-03-26");
        assert_string_equal(json_string_value(json_object_get(json_object_get(result, "serverInfo"), "name")),
                            "nsbox");
        assert_non_null(json_object_get(json_object_get(result, "capabilities"), "tools"));

        _cleanup_json_ json_t *r2 = reply_to(&st, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
                                                  "\"params\":{\"protocolVersion\":\"1.0\"}}");
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(r2, "result"), "protocolVersion")),
            MCP_LATEST_PROTOCOL_VERSION);

        struct mcp_action a;
        handle(&st, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &a);
        assert_int_equal(a.kind, MCP_ACTION_NONE);
        assert_true(st.initialized);
        mcp_action_clear(&a);
}

static void test_ping_answers_with_the_same_id(void **state)
{
        struct mcp_state st = { 0 };
        _cleanup_json_ json_t *r = reply_to(&st, "{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"ping\"}");
        assert_string_equal(json_string_value(json_object_get(r, "id")), "abc");
        json_t *result = json_object_get(r, "result");
        assert_true(json_is_object(result));
        assert_int_equal(json_object_size(result), 0);
}

static void test_unknown_method_is_32601_with_its_id(void **state)
{
        struct mcp_state st = { 0 };
        _cleanup_json_ json_t *r =
            reply_to(&st, "{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"resources/list\",\"params\":{}}");
        assert_int_equal(error_code(r), JSONRPC_METHOD_NOT_FOUND);
        assert_int_equal(json_integer_value(json_object_get(r, "id")), 42);
}

/* --- malformed lines -------------------------------------------------------------- */

static void test_malformed_lines_get_the_right_error(void **state)
{
        static const struct {
                const char *line;
                int code;
        } cases[] = {
                { "{", JSONRPC_PARSE_ERROR },
                { "not json", JSONRPC_PARSE_ERROR },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"ping\"}", JSONRPC_PARSE_ERROR },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} trailing", JSONRPC_PARSE_ERROR },
                { "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", JSONRPC_INVALID_REQUEST },
                { "\"ping\"", JSONRPC_INVALID_REQUEST },
                { "17", JSONRPC_INVALID_REQUEST },
                { "{\"id\":1,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\",\"id\":1}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[1]}",
                  JSONRPC_INVALID_PARAMS },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":\"x\"}",
                  JSONRPC_INVALID_PARAMS },
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                struct mcp_state st = { 0 };
                struct mcp_action a;
                handle(&st, cases[i].line, &a);
                if (a.kind != MCP_ACTION_REPLY)
                        fail_msg("no reply to %s", cases[i].line);
                if (error_code(a.reply) != cases[i].code)
                        fail_msg("%s: code %d, want %d", cases[i].line, error_code(a.reply), cases[i].code);
                mcp_action_clear(&a);
        }
}

static void test_error_replies_keep_a_usable_id_only(void **state)
{
        struct mcp_state st = { 0 };
        _cleanup_json_ json_t *r1 = reply_to(&st, "{\"jsonrpc\":\"1.0\",\"id\":\"q\",\"method\":\"ping\"}");
        assert_string_equal(json_string_value(json_object_get(r1, "id")), "q");
        _cleanup_json_ json_t *r2 = reply_to(&st, "{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"ping\"}");
        assert_true(json_is_null(json_object_get(r2, "id")));
        _cleanup_json_ json_t *r3 = reply_to(&st, "{oops");
        assert_true(json_is_null(json_object_get(r3, "id")));
}

static void test_a_nul_byte_inside_a_line_is_a_parse_error(void **state)
{
        static const char line[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"pi\0ng\"}";
        struct mcp_state st = { 0 };
        struct mcp_action a;
        mcp_handle_line(&st, line, sizeof(line) - 1, &a);
        assert_int_equal(a.kind, MCP_ACTION_REPLY);
        assert_int_equal(error_code(a.reply), JSONRPC_PARSE_ERROR);
        mcp_action_clear(&a);
}

static void test_notifications_responses_and_blank_lines_get_no_reply(void **state)
{
        const char *lines[] = {
                "",
                "   \r",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\"}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{}}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"params\":[1]}", /* malformed notification */
                "{\"jsonrpc\":\"1.0\",\"method\":\"ping\"}",
                "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}",
                "{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":1,\"message\":\"x\"}}",
        };
        for (size_t i = 0; i < ARRAY_SIZE(lines); i++) {
                struct mcp_state st = { 0 };
                struct mcp_action a;
                handle(&st, lines[i], &a);
                if (a.kind != MCP_ACTION_NONE)
                        fail_msg("unexpected action %d for %s", a.kind, lines[i]);
                mcp_action_clear(&a);
        }
}

static void test_cancelled_names_the_request(void **state)
{
        struct mcp_state st = { 0 };
        struct mcp_action a;
        handle(&st,
               "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":9,"
               "\"reason\":\"user\"}}",
               &a);
        assert_int_equal(a.kind, MCP_ACTION_CANCEL);
        assert_int_equal(json_integer_value(a.id), 9);
        mcp_action_clear(&a);
}

/* --- tools ------------------------------------------------------------------------ */

static void test_tools_list_is_the_spec_table(void **state)
{
        static const struct {
                const char *name;
                const char *required;
                const char *optional;
        } table[] = {
                { "create_sandbox", "", "session_id memory_mb timeout from_snapshot mounts image network" },
                { "list_sandboxes", "", "include_inactive" },
                { "remove_sandbox", "", "session_id sandbox_id force" },
                { "pause_sandbox", "", "session_id sandbox_id force" },
                { "resume_sandbox", "", "session_id sandbox_id" },
                { "snapshot_sandbox", "", "session_id sandbox_id name" },
                { "list_snapshots", "", "" },
                { "remove_snapshot", "snapshot_id", "" },
                { "run_code", "code", "session_id sandbox_id network stateful dependencies timeout" },
                { "execute_python_code", "code", "session_id sandbox_id timeout" },
                { "install_package", "package", "session_id sandbox_id" },
                { "python_execute", "code", "session_id sandbox_id dependencies timeout network" },
                { "shell_execute", "command", "session_id sandbox_id timeout network" },
                { "sandbox_fs_list", "path", "session_id sandbox_id network" },
                { "sandbox_fs_read", "path", "session_id sandbox_id network encoding offset max_bytes" },
                { "sandbox_fs_write", "path content", "session_id sandbox_id network encoding" },
                { "expose_port", "port", "session_id sandbox_id" },
                { "shell_start", "command", "session_id sandbox_id cwd network" },
                { "shell_output", "job_id", "session_id sandbox_id since" },
                { "shell_kill", "job_id", "session_id sandbox_id signal" },
                { "shell_session_run", "command",
                  "session_id sandbox_id network session_name blocking cwd timeout" },
                { "shell_session_check", "", "session_id sandbox_id session_name since" },
                { "shell_session_list", "", "session_id sandbox_id" },
                { "shell_session_close", "", "session_id sandbox_id session_name" },
                { "desktop_start", "", "session_id sandbox_id width height" },
                { "desktop_screenshot", "", "session_id sandbox_id" },
                { "desktop_click", "", "session_id sandbox_id x y button double" },
                { "desktop_type", "text", "session_id sandbox_id" },
                { "desktop_key", "keys", "session_id sandbox_id" },
                { "desktop_move", "x y", "session_id sandbox_id" },
                { "desktop_scroll", "direction", "session_id sandbox_id amount x y" },
        };
        struct mcp_state st = { 0 };
        _cleanup_json_ json_t *r = reply_to(&st, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}");
        json_t *tools = json_object_get(json_object_get(r, "result"), "tools");
        assert_int_equal(json_array_size(tools), ARRAY_SIZE(table));
        for (size_t i = 0; i < ARRAY_SIZE(table); i++) {
                json_t *tool = json_array_get(tools, i);
                assert_string_equal(json_string_value(json_object_get(tool, "name")), table[i].name);
                assert_true(strlen(json_string_value(json_object_get(tool, "description"))) > 40);
                json_t *schema = json_object_get(tool, "inputSchema");
                assert_string_equal(json_string_value(json_object_get(schema, "type")), "object");
                json_t *props = json_object_get(schema, "properties");
                json_t *required = json_object_get(schema, "required");
                char all[128];
                snprintf(all, sizeof(all), "%s %s", table[i].required, table[i].optional);
                size_t nprops = 0, nrequired = 0;
                for (char *save, *w = strtok_r(all, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
                        json_t *prop = json_object_get(props, w);
                        if (prop == NULL)
                                fail_msg("%s lacks argument %s", table[i].name, w);
                        assert_true(json_is_string(json_object_get(prop, "type")));
                        assert_true(json_string_length(json_object_get(prop, "description")) > 10);
                        nprops++;
                }
                assert_int_equal(json_object_size(props), nprops);
                char req[128];
                snprintf(req, sizeof(req), "%s", table[i].required);
                for (char *save, *w = strtok_r(req, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
                        bool found = false;
                        size_t k;
                        json_t *name;
                        json_array_foreach(required, k, name) found |=
                            strcmp(json_string_value(name), w) == 0;
                        if (!found)
                                fail_msg("%s: %s not required", table[i].name, w);
                        nrequired++;
                }
                assert_int_equal(json_array_size(required), nrequired);
        }
}

static void test_unknown_tool_is_a_jsonrpc_error(void **state)
{
        struct mcp_state st = { 0 };
        _cleanup_json_ json_t *r = reply_to(&st, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
                                                 "\"params\":{\"name\":\"rm_rf\",\"arguments\":{}}}");
        assert_int_equal(error_code(r), JSONRPC_INVALID_PARAMS);
        assert_non_null(
            strstr(json_string_value(json_object_get(json_object_get(r, "error"), "message")), "rm_rf"));
        _cleanup_json_ json_t *r2 =
            reply_to(&st, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{}}");
        assert_int_equal(error_code(r2), JSONRPC_INVALID_PARAMS);
}

static void test_bad_arguments_are_tool_errors_the_model_can_read(void **state)
{
        static const struct {
                const char *arguments;
                const char *says;
        } cases[] = {
                { "{\"session_id\":\"s\"}", "missing required argument \"command\"" },
                { "{\"session_id\":\"s\",\"sandbox_id\":\"x\",\"command\":\"ls\"}", "not both" },
                { "{\"session_id\":\"s\",\"command\":7}", "\"command\" must be a string" },
                { "{\"session_id\":\"\",\"command\":\"ls\"}", "\"session_id\" must not be empty" },
                { "{\"session_id\":\"s\",\"command\":\"ls\",\"timeout\":0}", "\"timeout\" must be from 1" },
                { "{\"session_id\":\"s\",\"command\":\"ls\",\"timeout\":\"5\"}", "must be an integer" },
                { "{\"session_id\":\"s\",\"command\":\"ls\",\"timeout\":2.5}", "must be an integer" },
                { "{\"session_id\":\"s\",\"command\":\"ls\",\"cwd\":\"/\"}", "unknown argument \"cwd\"" },
                { "[]", "arguments must be an object" },
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                char line[512];
                snprintf(line, sizeof(line),
                         "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":"
                         "\"shell_execute\",\"arguments\":%s}}",
                         cases[i].arguments);
                struct mcp_state st = { 0 };
                _cleanup_json_ json_t *r = reply_to(&st, line);
                json_t *result = json_object_get(r, "result");
                assert_true(json_is_true(json_object_get(result, "isError")));
                _cleanup_json_ json_t *shown = load(text_of(result));
                const char *error = json_string_value(json_object_get(shown, "error"));
                if (error == NULL || strstr(error, cases[i].says) == NULL)
                        fail_msg("%s: got %s, want %s", cases[i].arguments, text_of(result), cases[i].says);
        }
        /* Arrays are checked item by item. */
        struct mcp_state st = { 0 };
        _cleanup_json_ json_t *r = reply_to(
            &st,
            "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":{\"name\":\"python_execute\","
            "\"arguments\":{\"session_id\":\"s\",\"code\":\"1\",\"dependencies\":[\"numpy\",3]}}}");
        assert_non_null(strstr(text_of(json_object_get(r, "result")), "dependencies[]"));
}

static void test_a_valid_call_is_handed_to_a_worker_with_its_progress_token(void **state)
{
        struct mcp_state st = { 0 };
        struct mcp_action a;
        handle(&st,
               "{\"jsonrpc\":\"2.0\",\"id\":\"c1\",\"method\":\"tools/"
               "call\",\"params\":{\"name\":\"python_execute\","
               "\"arguments\":{\"session_id\":\"s\",\"code\":\"print(1)\",\"timeout\":30.0},"
               "\"_meta\":{\"progressToken\":\"tok\"}}}",
               &a);
        assert_int_equal(a.kind, MCP_ACTION_CALL);
        assert_string_equal(a.tool->name, "python_execute");
        assert_string_equal(json_string_value(a.id), "c1");
        assert_string_equal(json_string_value(a.progress_token), "tok");
        assert_string_equal(json_string_value(json_object_get(a.arguments, "code")), "print(1)");
        mcp_action_clear(&a);

        handle(&st,
               "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/"
               "call\",\"params\":{\"name\":\"list_sandboxes\"}}",
               &a);
        assert_int_equal(a.kind, MCP_ACTION_CALL);
        assert_null(a.progress_token);
        assert_true(json_is_object(a.arguments));
        mcp_action_clear(&a);
}

/* --- tool arguments → nsboxd params --------------------------------------------------- */

static json_t *params_for(const char *tool, const char *arguments, const char *sandbox_id)
{
        _cleanup_json_ json_t *args = load(arguments);
        const struct mcp_tool *t = mcp_tool_find(tool);
        assert_non_null(t);
        char buf[256];
        const char *why = mcp_check_arguments(t, args, buf, sizeof(buf));
        if (why != NULL)
                fail_msg("%s %s: %s", tool, arguments, why);
        return mcp_daemon_params(t, args, sandbox_id);
}

static void assert_json(const json_t *got, const char *want_text)
{
        _cleanup_json_ json_t *want = load(want_text);
        if (!json_equal((json_t *)got, want)) {
                _cleanup_free_ char *text = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
                fail_msg("got %s, want %s", text, want_text);
        }
}

static void test_arguments_map_to_the_daemon_params_of_the_spec(void **state)
{
        _cleanup_json_ json_t *create =
            params_for("create_sandbox", "{\"session_id\":\"a\",\"memory_mb\":256,\"timeout\":60}", NULL);
        assert_string_equal(mcp_tool_find("create_sandbox")->method, "sandbox.create");
        assert_json(
            create,
            "{\"session_id\":\"a\",\"limits\":{\"memory_bytes\":268435456},\"idle_timeout_seconds\":60}");

        _cleanup_json_ json_t *list = params_for("list_sandboxes", "{\"include_inactive\":true}", NULL);
        assert_json(list, "{\"include_inactive\":true}");

        _cleanup_json_ json_t *rm =
            params_for("remove_sandbox", "{\"sandbox_id\":\"x\",\"force\":true}", NULL);
        assert_json(rm, "{\"sandbox_id\":\"x\",\"force\":true}");

        _cleanup_json_ json_t *py =
            params_for("execute_python_code", "{\"sandbox_id\":\"x\",\"code\":\"1\",\"timeout\":5}", NULL);
        assert_string_equal(mcp_tool_find("execute_python_code")->method, "python.run");
        assert_json(py, "{\"sandbox_id\":\"x\",\"code\":\"1\",\"timeout_seconds\":5}");

        _cleanup_json_ json_t *pip =
            params_for("install_package", "{\"sandbox_id\":\"x\",\"package\":\"six\"}", NULL);
        assert_string_equal(mcp_tool_find("install_package")->method, "package.install");
        assert_json(pip, "{\"sandbox_id\":\"x\",\"packages\":[\"six\"]}");

        _cleanup_json_ json_t *session_py = params_for(
            "python_execute",
            "{\"session_id\":\"s\",\"code\":\"1\",\"dependencies\":[\"six\"],\"timeout\":7.0}", "sb1");
        assert_json(
            session_py,
            "{\"sandbox_id\":\"sb1\",\"code\":\"1\",\"requirements\":[\"six\"],\"timeout_seconds\":7}");

        _cleanup_json_ json_t *sh =
            params_for("shell_execute", "{\"session_id\":\"s\",\"command\":\"ls\",\"timeout\":9}", "sb1");
        assert_string_equal(mcp_tool_find("shell_execute")->method, "sandbox.exec");
        assert_json(
            sh, "{\"sandbox_id\":\"sb1\",\"command\":\"ls\",\"timeout_seconds\":9,\"cwd\":\"/workspace\"}");

        static const char *const fs[][2] = { { "sandbox_fs_list", "fs.list" },
                                             { "sandbox_fs_read", "fs.read" },
                                             { "sandbox_fs_write", "fs.write" } };
        for (size_t i = 0; i < ARRAY_SIZE(fs); i++)
                assert_string_equal(mcp_tool_find(fs[i][0])->method, fs[i][1]);
        _cleanup_json_ json_t *write = params_for(
            "sandbox_fs_write", "{\"session_id\":\"s\",\"path\":\"a.txt\",\"content\":\"hi\"}", "sb1");
        assert_json(write, "{\"sandbox_id\":\"sb1\",\"path\":\"a.txt\",\"content\":\"hi\"}");

        _cleanup_json_ json_t *args = load("{\"session_id\":\"s\",\"path\":\".\"}");
        _cleanup_json_ json_t *session = mcp_session_params(args);
        assert_json(session, "{\"session_id\":\"s\"}");
}

static void test_network_goes_to_the_session_create_not_to_the_tool_method(void **state)
{
        _cleanup_json_ json_t *args = load("{\"session_id\":\"s\",\"network\":\"pypi\",\"command\":\"ls\"}");
        _cleanup_json_ json_t *session = mcp_session_params(args);
        assert_json(session, "{\"session_id\":\"s\",\"network\":\"pypi\"}");
        _cleanup_json_ json_t *shell = params_for(
            "shell_execute", "{\"session_id\":\"s\",\"network\":\"pypi\",\"command\":\"ls\"}", "sb1");
        assert_null(json_object_get(shell, "network"));
        /* create_sandbox passes it as it is. */
        _cleanup_json_ json_t *create = params_for("create_sandbox", "{\"network\":\"pypi\"}", NULL);
        assert_json(create, "{\"network\":\"pypi\"}");
        /* An existing session sandbox with another network is updated; the same one, or no network asked,
         * not. */
        _cleanup_json_ json_t *none = load("{\"sandbox_id\":\"sb1\",\"network\":\"none\"}");
        _cleanup_json_ json_t *update = mcp_session_update_params(args, none);
        assert_json(update, "{\"sandbox_id\":\"sb1\",\"network\":\"pypi\"}");
        _cleanup_json_ json_t *same = load("{\"sandbox_id\":\"sb1\",\"network\":\"pypi\"}");
        assert_null(mcp_session_update_params(args, same));
        _cleanup_json_ json_t *plain = load("{\"session_id\":\"s\",\"command\":\"ls\"}");
        assert_null(mcp_session_update_params(plain, none));
        /* expose_port forwards to sandbox.expose with sandbox_id and port. */
        assert_string_equal(mcp_tool_find("expose_port")->method, "sandbox.expose");
        _cleanup_json_ json_t *expose =
            params_for("expose_port", "{\"sandbox_id\":\"sb1\",\"port\":8000}", NULL);
        assert_json(expose, "{\"sandbox_id\":\"sb1\",\"port\":8000}");
}

static void test_job_tools_map_to_background_execs(void **state)
{
        _cleanup_json_ json_t *start =
            params_for("shell_start", "{\"session_id\":\"s\",\"command\":\"srv\",\"cwd\":\"site\"}", "sb1");
        assert_json(start, "{\"sandbox_id\":\"sb1\",\"command\":\"srv\",\"cwd\":\"/workspace/site\","
                           "\"background\":true,\"timeout_seconds\":86400,\"encoding\":\"base64\"}");
        _cleanup_json_ json_t *kill =
            params_for("shell_kill", "{\"session_id\":\"s\",\"job_id\":\"e1\",\"signal\":\"TERM\"}", "sb1");
        assert_json(kill, "{\"sandbox_id\":\"sb1\",\"exec_id\":\"e1\",\"signal\":15}");
        char buf[256];
        _cleanup_json_ json_t *bad = load("{\"session_id\":\"s\",\"job_id\":\"e1\",\"signal\":\"STOP\"}");
        assert_string_equal(mcp_check_arguments(mcp_tool_find("shell_kill"), bad, buf, sizeof(buf)),
                            "argument \"signal\" must be one of KILL, TERM, INT, HUP");
        _cleanup_json_ json_t *since =
            load("{\"session_id\":\"s\",\"job_id\":\"e1\",\"since\":{\"stdin\":1}}");
        assert_non_null(mcp_check_arguments(mcp_tool_find("shell_output"), since, buf, sizeof(buf)));
        /* "aGVsbG8=" is "hello": shown from since 3, next is 3 + 5. */
        _cleanup_json_ json_t *output =
            load("{\"stdout\":\"aGVsbG8=\",\"stderr\":\"\",\"next\":{\"stdout\":8,"
                 "\"stderr\":0},\"running\":false}");
        _cleanup_json_ json_t *since_at = load("{\"stdout\":3}");
        _cleanup_json_ json_t *entry = load("{\"exec_id\":\"e1\",\"running\":false,\"exit_code\":2}");
        _cleanup_json_ json_t *shown = mcp_job_output_result("e1", output, since_at, entry);
        assert_json(shown, "{\"job_id\":\"e1\",\"running\":false,\"stdout\":\"hello\",\"stderr\":\"\","
                           "\"exit_code\":2,\"next\":{\"stdout\":8,\"stderr\":0},\"more\":false}");
}

/* --- nsboxd results → CallToolResult ------------------------------------------------- */

static void test_python_images_become_image_blocks_without_structured_content(void **state)
{
        _cleanup_json_ json_t *answer =
            load("{\"status\":\"ok\",\"stdout\":\"hi\\n\",\"stderr\":\"\",\"exit_code\":0,\"outputs\":["
                 "{\"type\":\"logs\",\"logs\":\"hi\\n\"},"
                 "{\"type\":\"image\",\"image\":{\"mime\":\"image/"
                 "png\",\"data\":\"iVBORw0KGgo=\",\"path\":\"a.png\"}},"
                 "{\"type\":\"image\",\"image\":{\"data\":\"AAAA\"}}],\"result\":null}");
        _cleanup_json_ json_t *r = mcp_call_result(mcp_tool_find("python_execute"), answer, "2025-11-25");
        assert_true(json_is_false(json_object_get(r, "isError")));
        assert_null(json_object_get(r, "structuredContent"));
        json_t *content = json_object_get(r, "content");
        assert_int_equal(json_array_size(content), 3);
        json_t *image = json_array_get(content, 1);
        assert_string_equal(json_string_value(json_object_get(image, "type")), "image");
        assert_string_equal(json_string_value(json_object_get(image, "mimeType")), "image/png");
        assert_string_equal(json_string_value(json_object_get(image, "data")), "iVBORw0KGgo=");
        assert_string_equal(json_string_value(json_object_get(json_array_get(content, 2), "data")), "AAAA");
        /* The text is the JSON result, without the base64 sent twice. */
        _cleanup_json_ json_t *shown = load(text_of(r));
        assert_string_equal(json_string_value(json_object_get(shown, "stdout")), "hi\n");
        assert_null(strstr(text_of(r), "iVBORw0KGgo="));
        assert_string_equal(
            json_string_value(json_object_get(
                json_object_get(json_array_get(json_object_get(shown, "outputs"), 0), "image"), "path")),
            "a.png");
        /* stdout has one home: no "logs" output repeats it. */
        assert_int_equal(json_array_size(json_object_get(shown, "outputs")), 2);
        /* The daemon's answer is not modified. */
        assert_non_null(json_object_get(
            json_object_get(json_array_get(json_object_get(answer, "outputs"), 1), "image"), "data"));
}

static void test_desktop_screenshots_are_one_image_block_and_their_size(void **state)
{
        _cleanup_json_ json_t *answer = load("{\"sandbox_id\":\"sb1\",\"mime_type\":\"image/png\",\"data\":"
                                             "\"iVBORw0KGgo=\",\"width\":800,\"height\":600}");
        _cleanup_json_ json_t *r = mcp_call_result(mcp_tool_find("desktop_screenshot"), answer, "2025-11-25");
        assert_true(json_is_false(json_object_get(r, "isError")));
        assert_null(json_object_get(r, "structuredContent"));
        json_t *content = json_object_get(r, "content");
        assert_int_equal(json_array_size(content), 2);
        json_t *image = json_array_get(content, 1);
        assert_string_equal(json_string_value(json_object_get(image, "type")), "image");
        assert_string_equal(json_string_value(json_object_get(image, "mimeType")), "image/png");
        assert_string_equal(json_string_value(json_object_get(image, "data")), "iVBORw0KGgo=");
        _cleanup_json_ json_t *shown = load(text_of(r));
        assert_int_equal(json_integer_value(json_object_get(shown, "width")), 800);
        assert_null(json_object_get(shown, "data"));
}

static void test_family_tools_map_to_their_daemon_methods(void **state)
{
        _cleanup_json_ json_t *run = params_for("run_code", "{\"code\":\"x = 1\"}", "sb1");
        assert_json(run, "{\"sandbox_id\":\"sb1\",\"code\":\"x = 1\",\"stateful\":true}");
        _cleanup_json_ json_t *fresh =
            params_for("run_code", "{\"session_id\":\"s\",\"code\":\"1\",\"stateful\":false}", "sb1");
        assert_json(fresh, "{\"sandbox_id\":\"sb1\",\"code\":\"1\",\"stateful\":false}");
        /* A sandbox_id argument is the sandbox: resolved, it is passed on once. */
        _cleanup_json_ json_t *by_id = params_for(
            "shell_session_run", "{\"sandbox_id\":\"sb1\",\"command\":\"pwd\",\"cwd\":\"src\"}", "sb1");
        assert_json(
            by_id,
            "{\"sandbox_id\":\"sb1\",\"session\":\"main\",\"command\":\"pwd\",\"cwd\":\"/workspace/src\"}");
        _cleanup_json_ json_t *check =
            params_for("shell_session_check", "{\"session_name\":\"w\",\"since\":{\"stdout\":3}}", "sb1");
        assert_json(check, "{\"sandbox_id\":\"sb1\",\"session\":\"w\",\"since\":{\"stdout\":3}}");
        _cleanup_json_ json_t *list = params_for("shell_session_list", "{}", "sb1");
        assert_json(list, "{\"sandbox_id\":\"sb1\"}");
        _cleanup_json_ json_t *read =
            params_for("sandbox_fs_read", "{\"path\":\"a.bin\",\"encoding\":\"base64\",\"offset\":4}", "sb1");
        assert_json(read, "{\"sandbox_id\":\"sb1\",\"path\":\"a.bin\",\"encoding\":\"base64\",\"offset\":4}");
        /* With no session_id, the connection's default session. */
        _cleanup_json_ json_t *none = load("{\"code\":\"1\"}");
        _cleanup_json_ json_t *session = mcp_session_params_default(none, "mcp-1234abcd");
        assert_json(session, "{\"session_id\":\"mcp-1234abcd\"}");
}

static void test_a_sandbox_is_named_by_session_id_or_sandbox_id_not_both(void **state)
{
        _cleanup_json_ json_t *both = load("{\"session_id\":\"s\",\"sandbox_id\":\"x\",\"code\":\"1\"}");
        _cleanup_json_ json_t *neither = load("{}");
        _cleanup_json_ json_t *net = load("{\"sandbox_id\":\"x\",\"network\":\"pypi\",\"command\":\"ls\"}");
        assert_non_null(strstr(mcp_check_address(mcp_tool_find("run_code"), both), "not both"));
        assert_null(mcp_check_address(mcp_tool_find("shell_session_list"), neither));
        assert_non_null(strstr(mcp_check_address(mcp_tool_find("remove_sandbox"), neither), "sandbox_id"));
        assert_non_null(mcp_check_address(mcp_tool_find("shell_execute"), net));
        assert_null(mcp_check_address(mcp_tool_find("create_sandbox"), both));
}

static void test_long_output_is_capped_head_and_tail_with_the_cap_stated(void **state)
{
        /* 30000 characters, two bytes each: the cap counts characters, cuts between them. */
        size_t n = 30000;
        _cleanup_free_ char *text = malloc(2 * n + 1);
        for (size_t i = 0; i < n; i++)
                memcpy(text + 2 * i, i < n / 2 ? "\xc3\xa9" : "\xc3\xbc", 2);
        text[2 * n] = '\0';
        _cleanup_json_ json_t *answer =
            json_pack("{s:s, s:s, s:i}", "stdout", text, "stderr", "short", "exit_code", 0);
        _cleanup_json_ json_t *r = mcp_call_result(mcp_tool_find("shell_execute"), answer, "2025-11-25");
        _cleanup_json_ json_t *shown = load(text_of(r));
        const char *out = json_string_value(json_object_get(shown, "stdout"));
        assert_non_null(strstr(out, "\n[... 10000 characters cut: output capped at 20000; to read all, "));
        assert_int_equal(strncmp(out, "\xc3\xa9\xc3\xa9", 4), 0);
        assert_int_equal(strcmp(out + strlen(out) - 4, "\xc3\xbc\xc3\xbc"), 0);
        assert_string_equal(json_string_value(json_object_get(shown, "stderr")), "short");
        assert_true(json_is_true(json_object_get(shown, "output_capped")));
        /* structuredContent is the same capped object, not the daemon's whole answer. */
        assert_true(json_equal(json_object_get(r, "structuredContent"), shown));
}

static void test_saved_images_are_the_image_files_not_already_shown(void **state)
{
        _cleanup_json_ json_t *answer =
            load("{\"files_produced\":{\"/workspace/figure_1.png\":100,\"/workspace/a.PNG\":10,"
                 "\"/workspace/b.jpg\":10,\"/workspace/c.csv\":10,\"/workspace/empty.png\":0,"
                 "\"/workspace/huge.png\":99999999},"
                 "\"outputs\":[{\"type\":\"image\",\"image\":{\"path\":\"/workspace/figure_1.png\"}}]}");
        _cleanup_json_ json_t *saved = mcp_saved_images(answer);
        assert_json(saved, "[{\"path\":\"/workspace/a.PNG\",\"mime\":\"image/png\"},"
                           "{\"path\":\"/workspace/b.jpg\",\"mime\":\"image/jpeg\"}]");
}

static void test_oom_killed_runs_say_out_of_memory(void **state)
{
        _cleanup_json_ json_t *answer = load(
            "{\"status\":\"error\",\"stdout\":\"\",\"stderr\":\"\",\"exit_code\":null,\"oom_killed\":true}");
        _cleanup_json_ json_t *r = mcp_call_result(mcp_tool_find("run_code"), answer, "2025-11-25");
        assert_true(json_is_true(json_object_get(r, "isError")));
        assert_non_null(strstr(text_of(r), "out of memory"));
}

static void test_python_errors_are_iserror_results_holding_the_traceback(void **state)
{
        static const char *const statuses[] = { "error", "timeout" };
        for (size_t i = 0; i < ARRAY_SIZE(statuses); i++) {
                _cleanup_json_ json_t *answer =
                    json_pack("{s:s, s:s, s:s, s:i}", "status", statuses[i], "stdout", "", "stderr",
                              "Traceback (most recent call last):\n  File \"script.py\"\nZeroDivisionError",
                              "exit_code", 1);
                _cleanup_json_ json_t *r =
                    mcp_call_result(mcp_tool_find("execute_python_code"), answer, "2025-06-18");
                assert_true(json_is_true(json_object_get(r, "isError")));
                assert_non_null(strstr(text_of(r), "Traceback (most recent call last)"));
                assert_non_null(strstr(text_of(r), "ZeroDivisionError"));
        }
}

static void test_exec_results_fail_on_nonzero_exit_signal_or_timeout(void **state)
{
        static const struct {
                const char *answer;
                bool is_error;
        } cases[] = {
                { "{\"exit_code\":0,\"signal\":null,\"timed_out\":false,\"stdout\":\"x\",\"stderr\":\"\"}",
                  false },
                { "{\"exit_code\":2,\"signal\":null,\"timed_out\":false,\"stdout\":\"\",\"stderr\":\"no\"}",
                  true },
                { "{\"exit_code\":null,\"signal\":9,\"timed_out\":false,\"stdout\":\"\",\"stderr\":\"\"}",
                  true },
                { "{\"exit_code\":null,\"signal\":9,\"timed_out\":true,\"stdout\":\"\",\"stderr\":\"\"}",
                  true },
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                _cleanup_json_ json_t *answer = load(cases[i].answer);
                _cleanup_json_ json_t *r =
                    mcp_call_result(mcp_tool_find("shell_execute"), answer, "2025-06-18");
                assert_int_equal(json_is_true(json_object_get(r, "isError")), cases[i].is_error);
                _cleanup_json_ json_t *shown = load(text_of(r));
                assert_true(json_equal(shown, answer));
        }
}

static void test_structured_content_only_for_clients_that_know_it(void **state)
{
        _cleanup_json_ json_t *answer = load("{\"sandboxes\":[],\"count\":0}");
        const struct mcp_tool *t = mcp_tool_find("list_sandboxes");
        _cleanup_json_ json_t *new_client = mcp_call_result(t, answer, "2025-06-18");
        assert_true(json_equal(json_object_get(new_client, "structuredContent"), answer));
        assert_true(json_is_false(json_object_get(new_client, "isError")));
        _cleanup_json_ json_t *old_client = mcp_call_result(t, answer, "2025-03-26");
        assert_null(json_object_get(old_client, "structuredContent"));
        _cleanup_json_ json_t *shown = load(text_of(old_client));
        assert_true(json_equal(shown, answer));
}

static void test_daemon_failures_are_iserror_results_with_the_kind(void **state)
{
        _cleanup_json_ json_t *error =
            load("{\"code\":-32000,\"message\":\"no such sandbox\",\"data\":{\"kind\":"
                 "\"not_found\"}}");
        _cleanup_json_ json_t *r = mcp_call_failure("sandbox.remove", "no such sandbox", error);
        assert_true(json_is_true(json_object_get(r, "isError")));
        _cleanup_json_ json_t *shown = load(text_of(r));
        assert_string_equal(json_string_value(json_object_get(shown, "error")), "no such sandbox");
        assert_string_equal(json_string_value(json_object_get(shown, "kind")), "not_found");
        assert_string_equal(json_string_value(json_object_get(shown, "method")), "sandbox.remove");
}

static void test_progress_notification_shape(void **state)
{
        _cleanup_json_ json_t *token = json_integer(7);
        _cleanup_json_ json_t *n = mcp_progress_notification(token, 1.5, "line\n");
        assert_string_equal(json_string_value(json_object_get(n, "method")), "notifications/progress");
        assert_null(json_object_get(n, "id"));
        json_t *params = json_object_get(n, "params");
        assert_int_equal(json_integer_value(json_object_get(params, "progressToken")), 7);
        assert_true(json_real_value(json_object_get(params, "progress")) == 1.5);
        assert_string_equal(json_string_value(json_object_get(params, "message")), "line\n");
}

/* --- framing ------------------------------------------------------------------------- */

struct lines {
        char got[8][64];
        int n, overlong;
};

static void collect(void *data, const char *line, size_t len)
{
        struct lines *l = data;
        if (line == NULL) {
                l->overlong++;
                return;
        }
        assert_true(l->n < 8 && len < 64);
        memcpy(l->got[l->n], line, len);
        l->got[l->n++][len] = '\0';
}

static void test_reader_splits_lines_across_reads(void **state)
{
        struct mcp_reader r = { .max = 32 };
        struct lines l = { 0 };
        const char *chunks[] = { "ab", "c\nde", "f\n\ng", "h" };
        for (size_t i = 0; i < ARRAY_SIZE(chunks); i++)
                assert_int_equal(mcp_reader_feed(&r, chunks[i], strlen(chunks[i]), collect, &l), 0);
        assert_int_equal(l.n, 3);
        assert_string_equal(l.got[0], "abc");
        assert_string_equal(l.got[1], "def");
        assert_string_equal(l.got[2], "");
        mcp_reader_finish(&r, collect, &l); /* EOF without a final newline */
        assert_int_equal(l.n, 4);
        assert_string_equal(l.got[3], "gh");
        assert_int_equal(l.overlong, 0);
        mcp_reader_free(&r);
}

static void test_reader_drops_an_overlong_line_once_and_carries_on(void **state)
{
        struct mcp_reader r = { .max = 8 };
        struct lines l = { 0 };
        const char *chunks[] = { "0123", "456789", "abcdef", "ghij\nok\n", "0123456789\nfine\n" };
        for (size_t i = 0; i < ARRAY_SIZE(chunks); i++)
                assert_int_equal(mcp_reader_feed(&r, chunks[i], strlen(chunks[i]), collect, &l), 0);
        assert_int_equal(l.overlong, 2);
        assert_int_equal(l.n, 2);
        assert_string_equal(l.got[0], "ok");
        assert_string_equal(l.got[1], "fine");
        mcp_reader_free(&r);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_supported_versions_are_echoed_and_others_get_the_latest),
                cmocka_unit_test(test_initialize_negotiates_and_describes_the_server),
                cmocka_unit_test(test_ping_answers_with_the_same_id),
                cmocka_unit_test(test_unknown_method_is_32601_with_its_id),
                cmocka_unit_test(test_malformed_lines_get_the_right_error),
                cmocka_unit_test(test_error_replies_keep_a_usable_id_only),
                cmocka_unit_test(test_a_nul_byte_inside_a_line_is_a_parse_error),
                cmocka_unit_test(test_notifications_responses_and_blank_lines_get_no_reply),
                cmocka_unit_test(test_cancelled_names_the_request),
                cmocka_unit_test(test_tools_list_is_the_spec_table),
                cmocka_unit_test(test_unknown_tool_is_a_jsonrpc_error),
                cmocka_unit_test(test_bad_arguments_are_tool_errors_the_model_can_read),
                cmocka_unit_test(test_a_valid_call_is_handed_to_a_worker_with_its_progress_token),
                cmocka_unit_test(test_arguments_map_to_the_daemon_params_of_the_spec),
                cmocka_unit_test(test_network_goes_to_the_session_create_not_to_the_tool_method),
                cmocka_unit_test(test_python_images_become_image_blocks_without_structured_content),
                cmocka_unit_test(test_desktop_screenshots_are_one_image_block_and_their_size),
                cmocka_unit_test(test_family_tools_map_to_their_daemon_methods),
                cmocka_unit_test(test_a_sandbox_is_named_by_session_id_or_sandbox_id_not_both),
                cmocka_unit_test(test_long_output_is_capped_head_and_tail_with_the_cap_stated),
                cmocka_unit_test(test_saved_images_are_the_image_files_not_already_shown),
                cmocka_unit_test(test_oom_killed_runs_say_out_of_memory),
                cmocka_unit_test(test_python_errors_are_iserror_results_holding_the_traceback),
                cmocka_unit_test(test_exec_results_fail_on_nonzero_exit_signal_or_timeout),
                cmocka_unit_test(test_structured_content_only_for_clients_that_know_it),
                cmocka_unit_test(test_daemon_failures_are_iserror_results_with_the_kind),
                cmocka_unit_test(test_progress_notification_shape),
                cmocka_unit_test(test_job_tools_map_to_background_execs),
                cmocka_unit_test(test_reader_splits_lines_across_reads),
                cmocka_unit_test(test_reader_drops_an_overlong_line_once_and_carries_on),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
