/* SPDX-License-Identifier: Apache-2.0 */
/* The one-shot sandbox-server contract: POST /execute {code, timeout_seconds,
 * requirements, files} in a fresh sandbox made for the request and removed
 * after it (nothing is left for the next call), and GET /health. */
#include "execute.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "json_cleanup.h"
#include "nsboxd.h"
#include "relpath.h"
#include "reply.h"
#include "textenc.h"

/* Produced files come back in the reply, base64 (4/3 of this): beyond this
 * many bytes in all, the rest are left out (files_left_out counts them). */
#define SEED_MAX_PRODUCED_BYTES ((json_int_t)64 << 20)

static enum MHD_Result bad(struct http_request *r, const char *what)
{
        return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params", "%s", what);
}

static void remove_sandbox(struct client *c, const char *id)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:b}", "sandbox_id", id, "force", 1);
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        if (client_call(c, "sandbox.remove", params, NULL, NULL, &result, &error, &err) < 0)
                fprintf(stderr, "nsbox-http: remove sandbox %s: %s\n", id, err ? err->message : "?");
}

/* Steps that may fail with an nsboxd error: its status, as for any call. */
static int call(struct client *c, const char *method, json_t *params, json_t **result, json_t **error,
                nsbox_error_t **err)
{
        *error = NULL;
        return client_call(c, method, params, NULL, NULL, result, error, err);
}

/* Files in, the run, produced files out: the contract's SandboxResponse. */
static int run_in_sandbox(struct client *c, const char *id, json_t *code, json_t *timeout,
                          json_t *requirements, json_t *files, json_t **answer, json_t **error,
                          nsbox_error_t **err)
{
        const char *key;
        json_t *v;
        int r;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:O}", "sandbox_id", id, "code", code);
        if (params == NULL)
                return nsbox_error(err, ENOMEM, "python.run");
        if (json_integer_value(timeout) > 0)
                json_object_set(params, "timeout_seconds", timeout);
        if (json_array_size(requirements) > 0)
                json_object_set(params, "requirements", requirements);
        /* The files go with the run, as bytes: python.run writes them first. */
        if (json_object_size(files) > 0) {
                json_t *in = json_object();
                json_object_set_new(params, "files", in);
                json_object_foreach(files, key, v)
                {
                        if (json_object_set_new(
                                in, key, json_pack("{s:O, s:s}", "content", v, "encoding", "base64")) < 0)
                                return nsbox_error(err, ENOMEM, "python.run");
                }
        }
        _cleanup_json_ json_t *run = NULL;
        if ((r = call(c, "python.run", params, &run, error, err)) < 0)
                return r;
        _cleanup_json_ json_t *produced = json_object();
        json_int_t total = 0, left_out = 0;
        json_object_foreach(json_object_get(run, "files_produced"), key, v)
        {
                /* nsboxd says each file's size: what would not fit is counted, not read */
                json_int_t size = json_integer_value(v);
                if (size > SEED_MAX_PRODUCED_BYTES - total) {
                        left_out++;
                        continue;
                }
                total += size;
                _cleanup_json_ json_t *p =
                    json_pack("{s:s, s:s, s:s}", "sandbox_id", id, "path", key, "encoding", "base64");
                _cleanup_json_ json_t *res = NULL;
                if ((r = call(c, "fs.read", p, &res, error, err)) < 0)
                        return r;
                /* relative to /workspace, as the request's files are */
                const char *name = strncmp(key, "/workspace/", 11) == 0 ? key + 11 : key;
                json_object_set(produced, name, json_object_get(res, "content"));
        }
        const char *status = json_string_value(json_object_get(run, "status"));
        json_t *exit_code = json_object_get(run, "exit_code");
        *answer = json_pack(
            "{s:s, s:O, s:O, s:I, s:O, s:O}", "status",
            status && strcmp(status, "ok") == 0 ? "success" : "error", "stdout",
            json_object_get(run, "stdout"), "stderr", json_object_get(run, "stderr"), "exit_code",
            json_is_integer(exit_code) ? json_integer_value(exit_code) : (json_int_t)-1, "execution_time_ms",
            json_object_get(run, "execution_time_ms"), "files_produced", produced);
        if (*answer == NULL)
                return nsbox_error(err, ENOMEM, "answer");
        if (status && strcmp(status, "timeout") == 0)
                json_object_set_new(*answer, "timed_out", json_true());
        if (left_out > 0 || json_integer_value(json_object_get(run, "files_left_out")) > 0)
                json_object_set_new(
                    *answer, "files_left_out",
                    json_integer(left_out + json_integer_value(json_object_get(run, "files_left_out"))));
        return 0;
}

enum MHD_Result http_execute(struct http_request *r, json_t *body)
{
        json_t *code = json_object_get(body, "code"), *timeout = json_object_get(body, "timeout_seconds"),
               *requirements = json_object_get(body, "requirements"), *files = json_object_get(body, "files");
        const char *key;
        json_t *v;
        json_object_foreach(body, key, v)
        {
                if (strcmp(key, "code") && strcmp(key, "timeout_seconds") && strcmp(key, "requirements") &&
                    strcmp(key, "files"))
                        return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                                "unknown field \"%.64s\"", key);
        }
        if (!json_is_string(code) || json_string_length(code) == 0)
                return bad(r, "code must be a non-empty string");
        if (timeout != NULL && !json_is_null(timeout) &&
            (!json_is_integer(timeout) || json_integer_value(timeout) < 0 ||
             json_integer_value(timeout) > 86400))
                return bad(r, "timeout_seconds must be an integer from 0 to 86400 (0: the default)");
        if (requirements != NULL && !json_is_null(requirements)) {
                if (!json_is_array(requirements))
                        return bad(r, "requirements must be an array of strings");
                size_t i;
                json_array_foreach(requirements, i, v) if (!json_is_string(v)) return bad(
                    r, "requirements must be an array of strings");
        }
        if (files != NULL && !json_is_null(files) && !json_is_object(files))
                return bad(r, "files must be an object {path: base64 content}");
        /* Check every file before a sandbox is made for them. */
        json_object_foreach(files, key, v)
        {
                /* relative, no "..", no empty or "." parts: a path under /workspace */
                if (!relpath_ok(key, 0))
                        return http_reply_error(
                            r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                            "files[\"%.100s\"]: paths are relative to /workspace, without \"..\"", key);
                if (!json_is_string(v) || !base64_valid(json_string_value(v), json_string_length(v)))
                        return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                                "files[\"%.100s\"] must be base64", key);
        }

        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *made = NULL, *error = NULL;
        struct client *c = NULL;
        if (http_nsboxd_connect(r, &c, &error, &err) < 0)
                return http_reply_rpc_error(r, error, err);
        _cleanup_json_ json_t *create =
            http_config.execute_sandbox ? json_deep_copy(http_config.execute_sandbox) : json_object();
        if (call(c, "sandbox.create", create, &made, &error, &err) < 0) {
                enum MHD_Result ret = http_reply_rpc_error(r, error, err);
                client_close(c);
                return ret;
        }
        const char *id = json_string_value(json_object_get(made, "sandbox_id"));
        _cleanup_json_ json_t *answer = NULL;
        enum MHD_Result ret;
        if (id != NULL &&
            run_in_sandbox(c, id, code, timeout, requirements, files, &answer, &error, &err) == 0)
                ret = http_reply_json(r, MHD_HTTP_OK, steal_pointer(&answer));
        else
                ret = http_reply_rpc_error(r, error, err);
        if (id != NULL)
                remove_sandbox(c, id);
        client_close(c);
        return ret;
}

enum MHD_Result http_execute_health(struct http_request *r)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *info = NULL, *error = NULL, *empty = json_object();
        if (http_call(r, "server.load", empty, &info, &error, &err) < 0)
                return http_reply_rpc_error(r, error, err);
        json_int_t capacity = json_integer_value(json_object_get(info, "max_sandboxes"));
        json_int_t sandboxes = json_integer_value(json_object_get(info, "sandboxes"));
        json_int_t free_slots = capacity > sandboxes ? capacity - sandboxes : 0;
        json_t *health = json_pack(
            "{s:s, s:I, s:I, s:I, s:O, s:O, s:s}", "status", free_slots > 0 ? "ok" : "full", "capacity",
            capacity, "sandboxes", sandboxes, "free", free_slots, "version",
            json_object_get(info, "version") ?: json_null(), "cgroup",
            json_object_get(info, "cgroup") ?: json_null(), "message", "nsbox sandbox runtime is active");
        /* The load, for whoever places work: execs running, the host's load average and CPUs,
         * and the memory promised to sandboxes against what nsboxd may promise. */
        static const char *const load_keys[] = { "running_execs",
                                                 "loadavg",
                                                 "cpus",
                                                 "memory_committed_bytes",
                                                 "memory_commit_limit_bytes",
                                                 NULL };
        json_t *load = json_object();
        for (size_t i = 0; load_keys[i] != NULL; i++)
                json_object_set(load, load_keys[i], json_object_get(info, load_keys[i]) ?: json_null());
        json_object_set_new(health, "load", load);
        return http_reply_json(r, MHD_HTTP_OK, health);
}
