/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's code interpreter (e2b_interp.h) on python.run. The default context
 * is the sandbox's stateful interpreter itself; each further context is a
 * namespace of its own in that interpreter (a dict of globals that a small
 * helper runs the cell in, its trailing expression the result), so no
 * interpreter more is started. Only Python is spoken. */
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
#include "reply.h"

#define DEFAULT_CONTEXT "default"
/* Contexts remembered (past it the oldest is forgotten; its namespace
 * stays in the interpreter until the sandbox goes). */
#define CONTEXT_TABLE_SIZE 1024
/* A cell's time limit (E2B's SDKs wait 300 s by default). */
#define CELL_TIMEOUT_SECONDS 300

/* Runs a cell in a context's namespace; the trailing expression's value is
 * the call's, so the stateful interpreter shows it as the result. */
static const char context_helper[] =
    "if '__nsbox_contexts' not in globals():\n"
    "    __nsbox_contexts = {}\n"
    "    def __nsbox_context_run(context, code):\n"
    "        import ast\n"
    "        ns = __nsbox_contexts.setdefault(context, {'__name__': '__main__'})\n"
    "        tree = ast.parse(code, '<cell>', 'exec')\n"
    "        last = None\n"
    "        if tree.body and isinstance(tree.body[-1], ast.Expr):\n"
    "            last = ast.Expression(tree.body.pop().value)\n"
    "        exec(compile(tree, '<cell>', 'exec'), ns)\n"
    "        if last is not None:\n"
    "            return eval(compile(last, '<cell>', 'eval'), ns)\n";

struct context {
        uid_t uid;
        char sandbox_id[129];
        char id[40];
        char *cwd;
        unsigned long long executions;
};

static pthread_mutex_t contexts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct context contexts[CONTEXT_TABLE_SIZE];
static size_t contexts_next;

static struct context *context_find(uid_t uid, const char *sandbox_id, const char *id)
{
        for (size_t i = 0; i < CONTEXT_TABLE_SIZE; i++)
                if (contexts[i].id[0] && contexts[i].uid == uid &&
                    strcmp(contexts[i].sandbox_id, sandbox_id) == 0 && strcmp(contexts[i].id, id) == 0)
                        return &contexts[i];
        return NULL;
}

static json_t *context_json(const char *id, const char *cwd)
{
        return json_pack("{s:s, s:s, s:s}", "id", id, "language", "python", "cwd", cwd ? cwd : "/workspace");
}

/* A Python string literal of text (JSON's escapes are Python's too). */
static char *python_literal(const char *text)
{
        _cleanup_json_ json_t *s = json_string(text);
        return s ? json_dumps(s, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
}

static int run_python(struct http_request *r, const char *sandbox_id, const char *code, json_t **result,
                      json_t **error, nsbox_error_t **err)
{
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:s, s:b, s:i}", "sandbox_id", sandbox_id, "code", code, "stateful", 1,
                      "timeout_seconds", CELL_TIMEOUT_SECONDS);
        return http_call(r, "python.run", params, result, error, err);
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

static enum MHD_Result execute(struct http_request *r, const char *sandbox_id)
{
        enum MHD_Result ret;
        _cleanup_json_ json_t *body = http_body_object(r, &ret);
        if (body == NULL)
                return ret;
        const char *code = json_string_value(json_object_get(body, "code"));
        json_t *context_id = json_object_get(body, "context_id"),
               *language = json_object_get(body, "language");
        if (code == NULL)
                return e2b_reply_rest_error(r, 400, "code must be a string");
        if (context_id != NULL && !json_is_null(context_id) && language != NULL && !json_is_null(language))
                return e2b_reply_rest_error(r, 400, "give a context_id or a language, not both");
        const char *lang = json_string_value(language);
        if (lang != NULL && strcmp(lang, "python") != 0)
                return e2b_reply_rest_error(r, 400, "nsbox runs python only, not %.64s", lang);
        const char *ctx = json_string_value(context_id);
        unsigned long long executions = 0;
        _cleanup_free_ char *wrapped = NULL;
        if (ctx != NULL && strcmp(ctx, DEFAULT_CONTEXT) != 0) {
                pthread_mutex_lock(&contexts_lock);
                struct context *c = context_find(r->uid, sandbox_id, ctx);
                if (c != NULL)
                        executions = ++c->executions;
                pthread_mutex_unlock(&contexts_lock);
                if (c == NULL)
                        return e2b_reply_rest_error(r, 404, "no context %.64s", ctx);
                _cleanup_free_ char *id_literal = python_literal(ctx), *code_literal = python_literal(code);
                if (id_literal == NULL || code_literal == NULL ||
                    asprintf(&wrapped, "%s__nsbox_context_run(%s, %s)", context_helper, id_literal,
                             code_literal) < 0)
                        return e2b_reply_rest_error(r, 500, "out of memory");
                code = wrapped;
        }
        if (*code == '\0')
                code = "None";
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (run_python(r, sandbox_id, code, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        char *buf = NULL;
        size_t len = 0, cap = 0;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        json_int_t stamp = (json_int_t)now.tv_sec * 1000000 + now.tv_nsec / 1000;
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
                        rc = ndjson_line(&buf, &len, &cap,
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
                        rc = ndjson_line(&buf, &len, &cap,
                                         json_pack("{s:s, s:O, s:b}", "type", "result",
                                                   strcmp(mime, "image/jpeg") == 0 ? "jpeg" : "png", data,
                                                   "is_main_result", 0));
        }
        json_t *value = json_object_get(result, "result");
        if (rc == 0 && json_is_string(value) && !failed && strcmp(json_string_value(value), "None") != 0)
                rc = ndjson_line(
                    &buf, &len, &cap,
                    json_pack("{s:s, s:O, s:b}", "type", "result", "text", value, "is_main_result", 1));
        if (rc == 0 && failed)
                rc = ndjson_line(&buf, &len, &cap, error_line(result));
        if (rc == 0 && executions > 0)
                rc = ndjson_line(&buf, &len, &cap,
                                 json_pack("{s:s, s:I}", "type", "number_of_executions", "execution_count",
                                           (json_int_t)executions));
        if (rc == 0)
                rc = ndjson_line(&buf, &len, &cap, json_pack("{s:s}", "type", "end_of_execution"));
        if (rc < 0) {
                free(buf);
                return e2b_reply_rest_error(r, 500, "out of memory");
        }
        return http_reply_bytes(r, MHD_HTTP_OK, "application/x-ndjson", buf, len);
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
        pthread_mutex_lock(&contexts_lock);
        struct context *c = &contexts[contexts_next];
        contexts_next = (contexts_next + 1) % CONTEXT_TABLE_SIZE;
        free(c->cwd);
        *c = (struct context){ .uid = r->uid };
        snprintf(c->sandbox_id, sizeof(c->sandbox_id), "%s", sandbox_id);
        snprintf(c->id, sizeof(c->id), "%s", id);
        c->cwd = cwd ? strndup(cwd, 4096) : NULL;
        pthread_mutex_unlock(&contexts_lock);
        return http_reply_json(r, MHD_HTTP_OK, context_json(id, cwd));
}

static enum MHD_Result list_contexts(struct http_request *r, const char *sandbox_id)
{
        json_t *list = json_array();
        json_array_append_new(list, context_json(DEFAULT_CONTEXT, NULL));
        pthread_mutex_lock(&contexts_lock);
        for (size_t i = 0; i < CONTEXT_TABLE_SIZE; i++)
                if (contexts[i].id[0] && contexts[i].uid == r->uid &&
                    strcmp(contexts[i].sandbox_id, sandbox_id) == 0)
                        json_array_append_new(list, context_json(contexts[i].id, contexts[i].cwd));
        pthread_mutex_unlock(&contexts_lock);
        return http_reply_json(r, MHD_HTTP_OK, list);
}

/* Forget a context's variables: a further one's namespace goes (remove)
 * or starts again (restart); the default one's names are deleted. */
static enum MHD_Result reset_context(struct http_request *r, const char *sandbox_id, const char *id,
                                     bool remove)
{
        _cleanup_free_ char *code = NULL;
        if (strcmp(id, DEFAULT_CONTEXT) == 0) {
                if (remove)
                        return e2b_reply_rest_error(r, 400, "the default context cannot be removed");
                code = strdup("for __nsbox_name in [n for n in globals() if not n.startswith('__')]:\n"
                              "    del globals()[__nsbox_name]\n");
        } else {
                pthread_mutex_lock(&contexts_lock);
                struct context *c = context_find(r->uid, sandbox_id, id);
                if (c != NULL && remove) {
                        free(c->cwd);
                        *c = (struct context){ 0 };
                }
                pthread_mutex_unlock(&contexts_lock);
                if (c == NULL)
                        return e2b_reply_rest_error(r, 404, "no context %.64s", id);
                _cleanup_free_ char *literal = python_literal(id);
                if (literal == NULL ||
                    asprintf(&code, "%sglobals()['__nsbox_contexts'].pop(%s, None)\nNone\n", context_helper,
                             literal) < 0)
                        code = NULL;
        }
        if (code == NULL)
                return e2b_reply_rest_error(r, 500, "out of memory");
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (run_python(r, sandbox_id, code, &result, &error, &err) < 0)
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
