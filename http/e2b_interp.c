/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's code interpreter (e2b_interp.h) on python.run's stateful
 * interpreter. The default context is its main namespace; each further
 * context is one of its named contexts (globals and cwd of their own, in
 * the one interpreter: python.run context). A cell streams: its output
 * reaches the client as the cell writes it (python.run stream). Only
 * Python is spoken. */
#include "e2b_interp.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "e2b_wire.h"
#include "json_cleanup.h"
#include "nsboxd.h"
#include "owned.h"
#include "reply.h"

#define DEFAULT_CONTEXT "default"
#define DEFAULT_CWD     "/workspace"
/* Contexts remembered per owner (past it the owner's oldest is forgotten;
 * nsboxd keeps it until it is removed or the sandbox goes, and caps them per
 * sandbox: 32 in each of an owner's 32 sandboxes). */
#define CONTEXTS_PER_OWNER 1024
/* A cell's time limit (E2B's SDKs wait 300 s by default). */
#define CELL_TIMEOUT_SECONDS 300

struct context {
        struct owned head;
        char sandbox_id[E2B_MAX_SANDBOX_ID + 1];
        char id[40];
        char *cwd;
        unsigned long long executions;
};

static void context_clear(void *entry)
{
        free(((struct context *)entry)->cwd);
}

static pthread_mutex_t contexts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct owned_table contexts = OWNED_TABLE(struct context, CONTEXTS_PER_OWNER, context_clear);

static struct context *context_at(size_t i)
{
        return owned_at(&contexts, i);
}

/* Under the lock. */
static struct context *context_find(uid_t uid, const char *sandbox_id, const char *id)
{
        for (size_t i = 0; i < contexts.size; i++) {
                struct context *c = context_at(i);
                if (c->head.used && c->head.uid == uid && strcmp(c->sandbox_id, sandbox_id) == 0 &&
                    strcmp(c->id, id) == 0)
                        return c;
        }
        return NULL;
}

static json_t *context_json(const char *id, const char *cwd)
{
        return json_pack("{s:s, s:s, s:s}", "id", id, "language", "python", "cwd", cwd ? cwd : DEFAULT_CWD);
}

/* python.run's params for a cell of context (NULL: the default one). */
static json_t *cell_params(const char *sandbox_id, const char *code, const char *context)
{
        json_t *params = json_pack("{s:s, s:s, s:b, s:i}", "sandbox_id", sandbox_id, "code", code, "stateful",
                                   1, "timeout_seconds", CELL_TIMEOUT_SECONDS);
        if (params != NULL && context != NULL)
                json_object_set_new(params, "context", json_string(context));
        return params;
}

static int ndjson_line(char **buf, size_t *len, size_t *cap, json_t *line)
{
        _cleanup_json_ json_t *owned = line;
        _cleanup_free_ char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
        if (text == NULL)
                return -ENOMEM;
        size_t n = strlen(text);
        if (*len + n + 1 > *cap) {
                size_t want = *cap ? *cap : 4096;
                while (want < *len + n + 1)
                        want *= 2;
                char *more = realloc(*buf, want);
                if (more == NULL)
                        return -ENOMEM;
                *buf = more;
                *cap = want;
        }
        memcpy(*buf + *len, text, n);
        (*buf)[*len + n] = '\n';
        *len += n + 1;
        return 0;
}

/* name, value and traceback of an error: python.run's `error` when it has
 * one, else the traceback's last line ("Name: value"). */
static json_t *error_line(json_t *result)
{
        json_t *e = json_object_get(result, "error");
        const char *stderr_text = json_string_value(json_object_get(result, "stderr"));
        if (json_is_object(e))
                return json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name",
                                 json_string_value(json_object_get(e, "name")) ?: "Error", "value",
                                 json_string_value(json_object_get(e, "value")) ?: "", "traceback",
                                 json_string_value(json_object_get(e, "traceback")) ?: (stderr_text ?: ""));
        _cleanup_free_ char *copy = strdup(stderr_text ? stderr_text : "");
        if (copy == NULL)
                return NULL;
        size_t n = strlen(copy);
        while (n > 0 && copy[n - 1] == '\n')
                copy[--n] = '\0';
        char *last = strrchr(copy, '\n');
        last = last ? last + 1 : copy;
        char *colon = strstr(last, ": ");
        if (colon != NULL)
                *colon = '\0';
        return json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", *last ? last : "Error", "value",
                         colon ? colon + 2 : "", "traceback", stderr_text ? stderr_text : "");
}

/* A cell's stream: its NDJSON lines, made from python.run's notifications
 * and answer, read by MHD in the connection's thread. */
struct cell_stream {
        struct client *c;
        long long call;
        int http_fd; /* the HTTP client's socket, watched for its leaving; -1 once it sent more */
        bool started;
        unsigned long long executions;
        struct e2b_body body;
};

static json_int_t now_us(void)
{
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        return (json_int_t)now.tv_sec * 1000000 + now.tv_nsec / 1000;
}

static void cell_notify(const char *method, json_t *params, void *data)
{
        struct cell_stream *s = data;
        if (strcmp(method, "exec.started") == 0) {
                s->started = true;
                return;
        }
        const char *stream = json_string_value(json_object_get(params, "stream"));
        json_t *text = json_object_get(params, "data");
        if (strcmp(method, "python.image") == 0 && json_is_string(text))
                ndjson_line(&s->body.buf, &s->body.len, &s->body.cap,
                            json_pack("{s:s, s:O, s:b}", "type", "result", "png", text, "is_main_result", 0));
        else if (strcmp(method, "exec.output") == 0 && stream != NULL && json_is_string(text) &&
                 (strcmp(stream, "stdout") == 0 || strcmp(stream, "stderr") == 0))
                ndjson_line(
                    &s->body.buf, &s->body.len, &s->body.cap,
                    json_pack("{s:s, s:O, s:I}", "type", stream, "text", text, "timestamp", now_us()));
}

/* The cell's answer: what it wrote and did not stream (nsboxd's own lines),
 * its figures, its main result, its error, its count and the end. */
static int cell_finish(struct cell_stream *s, json_t *result)
{
        s->body.done = true;
        char **buf = &s->body.buf;
        size_t *len = &s->body.len, *cap = &s->body.cap;
        json_int_t stamp = now_us();
        static const char *const streams[2] = { "stdout", "stderr" };
        const char *status = json_string_value(json_object_get(result, "status"));
        bool failed = status == NULL || strcmp(status, "ok") != 0;
        int rc = 0;
        for (int i = 0; i < 2 && rc == 0; i++) {
                const char *text = json_string_value(json_object_get(result, streams[i]));
                size_t n = text ? strlen(text) : 0;
                /* a failed cell's traceback is its error, not its stderr: what it
                 * wrote before the traceback stays */
                if (failed && i == 1 && text != NULL) {
                        const char *tb = NULL;
                        for (const char *at = text; (at = strstr(at, "Traceback (most recent call last):"));
                             at++)
                                tb = at;
                        n = tb ? (size_t)(tb - text) : 0;
                }
                if (n > 0)
                        rc = ndjson_line(buf, len, cap,
                                         json_pack("{s:s, s:s%, s:I}", "type", streams[i], "text", text, n,
                                                   "timestamp", stamp));
        }
        size_t i;
        json_t *out;
        json_array_foreach(json_object_get(result, "outputs"), i, out)
        {
                json_t *image = json_object_get(out, "image");
                const char *mime = json_string_value(json_object_get(image, "mime"));
                json_t *data = json_object_get(image, "data");
                if (rc == 0 && mime != NULL && json_is_string(data))
                        rc = ndjson_line(buf, len, cap,
                                         json_pack("{s:s, s:O, s:b}", "type", "result",
                                                   strcmp(mime, "image/jpeg") == 0 ? "jpeg" : "png", data,
                                                   "is_main_result", 0));
        }
        json_t *value = json_object_get(result, "result");
        if (rc == 0 && json_is_string(value) && !failed && strcmp(json_string_value(value), "None") != 0)
                rc = ndjson_line(
                    buf, len, cap,
                    json_pack("{s:s, s:O, s:b}", "type", "result", "text", value, "is_main_result", 1));
        if (rc == 0 && failed)
                rc = ndjson_line(buf, len, cap, error_line(result));
        if (rc == 0 && s->executions > 0)
                rc = ndjson_line(buf, len, cap,
                                 json_pack("{s:s, s:I}", "type", "number_of_executions", "execution_count",
                                           (json_int_t)s->executions));
        if (rc == 0)
                rc = ndjson_line(buf, len, cap, json_pack("{s:s}", "type", "end_of_execution"));
        return rc;
}

/* Wait for the next thing the call says: 1 after a notification, 0 when
 * it ended (its answer, or an error ending the stream, queued), <0 when
 * the HTTP client left or nsboxd is gone (*error, *err: why). */
static int cell_step(struct cell_stream *s, json_t **error, nsbox_error_t **err)
{
        _cleanup_json_ json_t *result = NULL;
        client_set_interrupt_fd(s->c, s->http_fd);
        int r = client_wait_one(s->c, s->call, cell_notify, s, &result, error, err);
        client_set_interrupt_fd(s->c, -1);
        if (r == -EINTR) {
                nsbox_error_free(err);
                if (http_client_left(s->http_fd))
                        return nsbox_refuse(err, ECONNABORTED, "the HTTP client went away");
                s->http_fd = -1; /* a pipelined request: wait for the answer alone */
                return 1;
        }
        if (r < 0)
                return r;
        if (r == 0 && cell_finish(s, result) < 0)
                return nsbox_error(err, ENOMEM, "the cell's answer");
        return r;
}

static bool cell_more(void *data)
{
        struct cell_stream *s = data;
        _cleanup_json_ json_t *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        int r = cell_step(s, &error, &err);
        if (r < 0 && (error != NULL || r != -ECONNABORTED)) {
                /* the stream has begun: the failure ends it as the cell's error */
                const char *m = json_string_value(json_object_get(error, "message"));
                ndjson_line(&s->body.buf, &s->body.len, &s->body.cap,
                            json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", "NsboxError", "value",
                                      m     ? m
                                      : err ? err->message
                                            : "error",
                                      "traceback", ""));
                ndjson_line(&s->body.buf, &s->body.len, &s->body.cap,
                            json_pack("{s:s}", "type", "end_of_execution"));
                s->body.done = true;
        }
        return r >= 0 || s->body.done;
}

static ssize_t cell_read(void *data, uint64_t pos, char *out, size_t max)
{
        struct cell_stream *s = data;
        return e2b_body_read(&s->body, out, max, cell_more, s);
}

static void cell_free(void *data)
{
        struct cell_stream *s = data;
        if (s->c != NULL)
                client_close(s->c); /* a cell still running is interrupted: nsboxd saw its client go */
        free(s->body.buf);
        free(s);
}

/* env_vars: {NAME: "value"} or null. */
static bool env_vars_ok(json_t *env)
{
        const char *k;
        json_t *v;
        if (env == NULL || json_is_null(env))
                return true;
        if (!json_is_object(env))
                return false;
        json_object_foreach(env, k, v)
        {
                if (!json_is_string(v))
                        return false;
        }
        return true;
}

static enum MHD_Result execute(struct http_request *r, const char *sandbox_id)
{
        enum MHD_Result ret;
        _cleanup_json_ json_t *body = http_body_object(r, &ret);
        if (body == NULL)
                return ret;
        const char *code = json_string_value(json_object_get(body, "code"));
        json_t *context_id = json_object_get(body, "context_id"),
               *language = json_object_get(body, "language"), *env = json_object_get(body, "env_vars");
        if (code == NULL)
                return e2b_reply_rest_error(r, 400, "code must be a string");
        if (context_id != NULL && !json_is_null(context_id) && language != NULL && !json_is_null(language))
                return e2b_reply_rest_error(r, 400, "give a context_id or a language, not both");
        const char *lang = json_string_value(language);
        if (lang != NULL && strcmp(lang, "python") != 0)
                return e2b_reply_rest_error(r, 400, "nsbox runs python only, not %.64s", lang);
        if (!env_vars_ok(env))
                return e2b_reply_rest_error(r, 400, "env_vars must be an object of strings");
        const char *ctx = json_string_value(context_id);
        unsigned long long executions = 0;
        if (ctx != NULL && strcmp(ctx, DEFAULT_CONTEXT) != 0) {
                pthread_mutex_lock(&contexts_lock);
                struct context *c = context_find(r->uid, sandbox_id, ctx);
                if (c != NULL)
                        executions = ++c->executions;
                pthread_mutex_unlock(&contexts_lock);
                if (c == NULL)
                        return e2b_reply_rest_error(r, 404, "no context %.64s", ctx);
        } else {
                ctx = NULL;
        }
        if (*code == '\0')
                code = "None";
        _cleanup_json_ json_t *params = cell_params(sandbox_id, code, ctx);
        if (params == NULL)
                return e2b_reply_rest_error(r, 500, "out of memory");
        json_object_set_new(params, "stream", json_true());
        if (json_object_size(env) > 0)
                json_object_set(params, "env", env);
        struct cell_stream *s = calloc(1, sizeof(*s));
        if (s == NULL)
                return e2b_reply_rest_error(r, 500, "out of memory");
        s->executions = executions;
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(r->connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        s->http_fd = info ? info->connect_fd : -1;
        _cleanup_json_ json_t *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        int rc = http_nsboxd_connect(r, &s->c, &error, &err);
        if (rc == 0)
                rc = client_send(s->c, "python.run", params, &s->call, &err);
        /* The status waits for the cell to start (or fail before): a refusal
         * (no such sandbox, bad env) is then the HTTP error it should be. */
        while (rc >= 0 && !s->started && !s->body.done)
                rc = cell_step(s, &error, &err);
        if (rc < 0) {
                cell_free(s);
                return rc == -ECONNABORTED && error == NULL ? MHD_NO
                                                            : e2b_reply_rest_rpc_error(r, error, err);
        }
        return http_reply_stream(r, "application/x-ndjson", cell_read, s, cell_free);
}

static enum MHD_Result create_context(struct http_request *r, const char *sandbox_id)
{
        enum MHD_Result ret;
        _cleanup_json_ json_t *body = r->body_len ? http_body_object(r, &ret) : json_object();
        if (body == NULL)
                return ret;
        const char *lang = json_string_value(json_object_get(body, "language"));
        const char *cwd = json_string_value(json_object_get(body, "cwd"));
        if (lang != NULL && strcmp(lang, "python") != 0)
                return e2b_reply_rest_error(r, 400, "nsbox runs python only, not %.64s", lang);
        unsigned char random[16];
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        bool ok = fd >= 0 && read(fd, random, sizeof(random)) == sizeof(random);
        if (fd >= 0)
                close(fd);
        if (!ok)
                return e2b_reply_rest_error(r, 500, "no randomness");
        char id[40];
        for (size_t i = 0; i < sizeof(random); i++)
                snprintf(id + 2 * i, 3, "%02x", random[i]);
        /* nsboxd makes the context with its first cell, which enters its cwd
         * (a cwd that does not exist makes none) and counts it against the
         * sandbox's contexts (limit_reached past them: 429). */
        _cleanup_json_ json_t *params = cell_params(sandbox_id, "None", id), *result = NULL, *error = NULL;
        if (params == NULL)
                return e2b_reply_rest_error(r, 500, "out of memory");
        json_object_set_new(params, "cwd", json_string(cwd ? cwd : DEFAULT_CWD));
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "python.run", params, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        json_t *failure = json_object_get(result, "error");
        if (failure != NULL)
                return e2b_reply_rest_error(r, 400, "the context's cwd %.256s: %.256s",
                                            cwd ? cwd : DEFAULT_CWD,
                                            json_string_value(json_object_get(failure, "value")) ?: "failed");
        pthread_mutex_lock(&contexts_lock);
        struct context *c = owned_add(&contexts, r->uid);
        if (c != NULL) {
                snprintf(c->sandbox_id, sizeof(c->sandbox_id), "%s", sandbox_id);
                snprintf(c->id, sizeof(c->id), "%s", id);
                c->cwd = cwd ? strndup(cwd, 4096) : NULL;
        }
        pthread_mutex_unlock(&contexts_lock);
        if (c == NULL)
                return e2b_reply_rest_error(r, 500, "out of memory");
        return http_reply_json(r, MHD_HTTP_OK, context_json(id, cwd));
}

static enum MHD_Result list_contexts(struct http_request *r, const char *sandbox_id)
{
        json_t *list = json_array();
        json_array_append_new(list, context_json(DEFAULT_CONTEXT, NULL));
        pthread_mutex_lock(&contexts_lock);
        for (size_t i = 0; i < contexts.size; i++) {
                struct context *c = context_at(i);
                if (c->head.used && c->head.uid == r->uid && strcmp(c->sandbox_id, sandbox_id) == 0)
                        json_array_append_new(list, context_json(c->id, c->cwd));
        }
        pthread_mutex_unlock(&contexts_lock);
        return http_reply_json(r, MHD_HTTP_OK, list);
}

/* Forget a context's variables (restart; its cwd is again the one it was
 * made with) or the context itself (remove); the default one can only be
 * restarted. */
static enum MHD_Result reset_context(struct http_request *r, const char *sandbox_id, const char *id,
                                     bool remove)
{
        bool main_context = strcmp(id, DEFAULT_CONTEXT) == 0;
        if (main_context && remove)
                return e2b_reply_rest_error(r, 400, "the default context cannot be removed");
        if (!main_context) {
                pthread_mutex_lock(&contexts_lock);
                struct context *c = context_find(r->uid, sandbox_id, id);
                if (c != NULL && remove)
                        owned_remove(&contexts, c);
                pthread_mutex_unlock(&contexts_lock);
                if (c == NULL)
                        return e2b_reply_rest_error(r, 404, "no context %.64s", id);
        }
        _cleanup_json_ json_t *params = json_pack("{s:s, s:b}", "sandbox_id", sandbox_id, "remove", remove),
                              *result = NULL, *error = NULL;
        if (params != NULL && !main_context)
                json_object_set_new(params, "context", json_string(id));
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (params == NULL)
                return e2b_reply_rest_error(r, 500, "out of memory");
        if (http_call(r, "python.reset", params, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        return http_reply_bytes(r, MHD_HTTP_NO_CONTENT, "application/json", NULL, 0);
}

enum MHD_Result http_e2b_interpreter(struct http_request *r, const char *sandbox_id)
{
        const char *url = r->url;
        bool get = strcmp(r->method, "GET") == 0, post = strcmp(r->method, "POST") == 0;
        if (get && strcmp(url, "/health") == 0)
                return http_reply_bytes(r, MHD_HTTP_OK, "text/plain", strdup("OK"), 2);
        if (post && strcmp(url, "/execute") == 0)
                return execute(r, sandbox_id);
        if (strcmp(url, "/contexts") == 0) {
                if (post)
                        return create_context(r, sandbox_id);
                if (get)
                        return list_contexts(r, sandbox_id);
        }
        char id[65], action[16];
        int n = 0;
        action[0] = '\0';
        if (strncmp(url, "/contexts/", 10) == 0 &&
            sscanf(url + 10, "%64[A-Za-z0-9_-]%n/%15[a-z]%n", id, &n, action, &n) >= 1 &&
            url[10 + n] == '\0') {
                if (strcmp(r->method, "DELETE") == 0 && action[0] == '\0')
                        return reset_context(r, sandbox_id, id, true);
                if (post && strcmp(action, "restart") == 0)
                        return reset_context(r, sandbox_id, id, false);
        }
        return e2b_reply_rest_error(r, 404, "the code interpreter has no %s %.200s", r->method, url);
}
