/* SPDX-License-Identifier: Apache-2.0 */
/* The one-shot sandbox-server contract (antwort's sandbox server): POST
 * /execute {code, timeout_seconds, requirements, files} in a fresh sandbox
 * made for the request and removed after it (nothing is left for the next
 * call), the files the code wrote to $OUTPUT_DIR returned; and GET /health. */
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

/* The contract's server gives code 30 s unless it asks for more. */
#define SEED_TIMEOUT_S 30
/* Where the code writes what it returns ($OUTPUT_DIR), as the contract's
 * server has it: output/ in the code's working directory. */
#define SEED_OUTPUT_DIR "/workspace/output"

/* The files the code wrote to its output directory, {name: base64}: the
 * regular files directly in it, as the contract's server returns them. */
static int collect_output(const struct http_request *r, struct client *c, const char *id, const char *dir,
                          json_t *produced, json_int_t *left_out, json_t **error, nsbox_error_t **err)
{
        _cleanup_json_ json_t *lp = json_pack("{s:s, s:s}", "sandbox_id", id, "path", dir);
        _cleanup_json_ json_t *listing = NULL;
        int ret = http_client_call(r, c, "fs.list", lp, &listing, error, err);
        if (ret < 0) {
                /* the code removed or replaced it: nothing produced */
                const char *e = json_string_value(json_object_get(json_object_get(*error, "data"), "errno"));
                if (*error != NULL && e != NULL && (strcmp(e, "ENOENT") == 0 || strcmp(e, "ENOTDIR") == 0)) {
                        json_decref(*error);
                        *error = NULL;
                        nsbox_error_free(err);
                        return 0;
                }
                return ret;
        }
        json_int_t total = 0;
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(listing, "entries"), i, e)
        {
                const char *type = json_string_value(json_object_get(e, "type"));
                const char *name = json_string_value(json_object_get(e, "name"));
                if (type == NULL || strcmp(type, "file") != 0 || name == NULL)
                        continue;
                /* fs.list says each file's size: what would not fit is counted, not read */
                json_int_t size = json_integer_value(json_object_get(e, "size"));
                if (size > SEED_MAX_PRODUCED_BYTES - total) {
                        (*left_out)++;
                        continue;
                }
                total += size;
                _cleanup_free_ char *path = NULL;
                if (asprintf(&path, "%s/%s", dir, name) < 0)
                        return nsbox_error(err, ENOMEM, "files_produced");
                _cleanup_json_ json_t *p =
                    json_pack("{s:s, s:s, s:s}", "sandbox_id", id, "path", path, "encoding", "base64");
                _cleanup_json_ json_t *res = NULL;
                if ((ret = http_client_call(r, c, "fs.read", p, &res, error, err)) < 0)
                        return ret;
                json_object_set(produced, name, json_object_get(res, "content"));
        }
        return 0;
}

/* Files in, the run, produced files out: the contract's SandboxResponse. */
static int run_in_sandbox(const struct http_request *r, struct client *c, const char *id, json_t *code,
                          unsigned timeout_s, const char *output_dir, json_t *requirements, json_t *files,
                          json_t **answer, json_t **error, nsbox_error_t **err)
{
        const char *key;
        json_t *v;
        int ret;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:O, s:I}", "sandbox_id", id, "code", code,
                                                  "timeout_seconds", (json_int_t)timeout_s);
        _cleanup_json_ json_t *mk = json_pack("{s:s, s:s, s:b}", "sandbox_id", id, "path", output_dir,
                                              "parents", 1),
                              *made = NULL;
        if (params == NULL || mk == NULL)
                return nsbox_error(err, ENOMEM, "python.run");
        if ((ret = http_client_call(r, c, "fs.mkdir", mk, &made, error, err)) < 0)
                return ret;
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
        if ((ret = http_client_call(r, c, "python.run", params, &run, error, err)) < 0)
                return ret;
        _cleanup_json_ json_t *produced = json_object();
        json_int_t left_out = 0;
        if ((ret = collect_output(r, c, id, output_dir, produced, &left_out, error, err)) < 0)
                return ret;
        const char *status = json_string_value(json_object_get(run, "status"));
        bool timed_out = status && strcmp(status, "timeout") == 0;
        json_t *exit_code = json_object_get(run, "exit_code");
        const char *stderr_text = json_string_value(json_object_get(run, "stderr")) ?: "";
        size_t n = http_stderr_without_nsbox_note(stderr_text);
        _cleanup_free_ char *stderr_out = NULL;
        /* as the contract's server says it, on a line of its own after what the code wrote
         * (instead of nsboxd's own words) */
        if (asprintf(&stderr_out, "%.*s%sexecution timed out after %u seconds", (int)n, stderr_text,
                     n > 0 && stderr_text[n - 1] != '\n' ? "\n" : "", timeout_s) < 0)
                return nsbox_error(err, ENOMEM, "answer");
        *answer = json_pack(
            "{s:s, s:O, s:s, s:I, s:O}", "status", status && strcmp(status, "ok") == 0 ? "success" : "error",
            "stdout", json_object_get(run, "stdout"), "stderr", timed_out ? stderr_out : stderr_text,
            "exit_code",
            json_is_integer(exit_code) && !timed_out ? json_integer_value(exit_code) : (json_int_t)-1,
            "execution_time_ms", json_object_get(run, "execution_time_ms"));
        if (*answer == NULL)
                return nsbox_error(err, ENOMEM, "answer");
        /* none: left out, as the contract's server leaves it out */
        if (json_object_size(produced) > 0)
                json_object_set(*answer, "files_produced", produced);
        if (timed_out)
                json_object_set_new(*answer, "timed_out", json_true());
        if (left_out > 0)
                json_object_set_new(*answer, "files_left_out", json_integer(left_out));
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
        _cleanup_json_ json_t *create =
            http_config.execute_sandbox ? json_deep_copy(http_config.execute_sandbox) : json_object();
        /* $OUTPUT_DIR, unless --execute-sandbox's env names its own */
        json_t *env = json_object_get(create, "env");
        if (env == NULL)
                json_object_set_new(create, "env", env = json_object());
        if (!json_is_string(json_object_get(env, "OUTPUT_DIR")))
                json_object_set_new(env, "OUTPUT_DIR", json_string(SEED_OUTPUT_DIR));
        const char *output_dir = json_string_value(json_object_get(env, "OUTPUT_DIR"));
        if (http_nsboxd_connect(r, &c, &error, &err) < 0)
                return http_reply_rpc_error(r, error, err);
        /* not cut short by a client that leaves: the sandbox it makes is removed below */
        if (client_call(c, "sandbox.create", create, NULL, NULL, &made, &error, &err) < 0) {
                enum MHD_Result ret = http_reply_rpc_error(r, error, err);
                client_close(c);
                return ret;
        }
        const char *id = json_string_value(json_object_get(made, "sandbox_id"));
        unsigned timeout_s =
            json_integer_value(timeout) > 0 ? (unsigned)json_integer_value(timeout) : SEED_TIMEOUT_S;
        _cleanup_json_ json_t *answer = NULL;
        enum MHD_Result ret;
        if (id != NULL && run_in_sandbox(r, c, id, code, timeout_s, output_dir, requirements, files, &answer,
                                         &error, &err) == 0)
                ret = http_reply_json(r, MHD_HTTP_OK, steal_pointer(&answer));
        else
                ret = http_reply_rpc_error(r, error, err);
        if (err != NULL && err->errnum == ECONNABORTED) {
                /* its client left: this connection's close ends the run, a new one removes the sandbox */
                client_close(c);
                c = NULL;
                _cleanup_json_ json_t *refused = NULL;
                _cleanup_error_ nsbox_error_t *again = NULL;
                if (id != NULL && http_nsboxd_connect(r, &c, &refused, &again) < 0)
                        c = NULL;
        }
        if (id != NULL && c != NULL)
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
