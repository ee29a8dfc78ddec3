/* SPDX-License-Identifier: Apache-2.0 */
/* The runtime contract the kubernetes-sigs/agent-sandbox Python SDK speaks
 * to the server in a sandbox pod: POST /execute {command} -> {stdout,
 * stderr, exit_code}; POST /upload (multipart/form-data, field "file",
 * its filename the destination); GET /download/PATH (the bytes), GET
 * /list/PATH ([{name, size, type, mod_time}]), GET /exists/PATH ({exists});
 * and the newer REST files API, /v1/files/PATH (GET a file's bytes or a
 * directory's {entries: [{name, size, type, modified_at, mode}]}, HEAD, PUT
 * the bytes, DELETE with ?recursive=true). Everything runs in the token's
 * default sandbox (POST /execute_command_stateful {code} too, in its
 * persistent interpreter): session "http-default" of its owner, made on first use
 * and kept. Every path is under the base directory /workspace (the
 * reference runtime's /app), "/" included; GET /v1/metadata answers the
 * SANDBOX_* environment. */
#include "agent_sandbox.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "json_cleanup.h"
#include "nsboxd.h"
#include "relpath.h"
#include "reply.h"
#include "textenc.h"

#define DEFAULT_SESSION "http-default"

/* An upload goes to the sandbox as it arrives, UPLOAD_CHUNK at a time
 * (fs.write, then fs.write append): any size, bounded memory, as the
 * reference runtime takes any size. One of more than a piece is written
 * under a temporary name beside its destination (staging_path) and renamed
 * over it once whole, or removed when the upload fails or its client goes:
 * the file it replaces stays whole. All of an upload's calls go on one
 * connection (u->c, never pooled), so that when nsbox-http itself dies
 * mid-upload nsboxd removes the temporary file as that connection closes.
 * One piece is one fs.write, which nsboxd makes whole or not at all. */
#define UPLOAD_CHUNK (4u << 20)

struct http_upload {
        struct http_request *r;
        struct MHD_PostProcessor *pp; /* POST /upload's multipart; NULL: a raw body (PUT /v1/files) */
        char *filename;               /* as sent */
        char path[4200];              /* its sandbox path */
        char staged[4200];            /* its temporary file, while written in pieces; or "" */
        struct client *c;             /* to nsboxd, from the first write on */
        char id[64];                  /* the default sandbox */
        char *data;                   /* what is not written yet */
        size_t len, cap;
        uint64_t written;
        bool started;     /* the file is made: later writes append */
        bool second_file; /* more than one file part: refused */
        bool not_form;    /* not multipart/form-data */
        bool denied;      /* a path out of the base directory */
        bool failed;      /* a write failed: error/err say why */
        json_t *error;
        nsbox_error_t *err;
};

/* The default sandbox of the request's owner (made on first use). */
static int default_sandbox(struct http_request *r, struct client *c, char *id, size_t id_len, json_t **error,
                           nsbox_error_t **err)
{
        _cleanup_json_ json_t *params = json_pack("{s:s}", "session_id", DEFAULT_SESSION);
        _cleanup_json_ json_t *result = NULL;
        int ret = http_client_call(r, c, "sandbox.create", params, &result, error, err);
        if (ret < 0)
                return ret;
        snprintf(id, id_len, "%s", json_string_value(json_object_get(result, "sandbox_id")) ?: "");
        return 0;
}

/* A connection to nsboxd as the request's owner, and its default sandbox. */
static int connect_default(struct http_request *r, struct client **out, char id[64], json_t **error,
                           nsbox_error_t **err)
{
        struct client *c = NULL;
        int ret = http_nsboxd_connect(r, &c, error, err);
        if (ret < 0)
                return ret;
        if ((ret = default_sandbox(r, c, id, 64, error, err)) < 0) {
                client_close(c);
                return ret;
        }
        *out = c;
        return 0;
}

/* One call in the owner's default sandbox: params get its sandbox_id. */
static int call_in_default(struct http_request *r, const char *method, json_t *params, json_t **result,
                           json_t **error, nsbox_error_t **err)
{
        struct client *c = NULL;
        char id[64];
        int ret = connect_default(r, &c, id, error, err);
        if (ret < 0)
                return ret;
        json_object_set_new(params, "sandbox_id", json_string(id));
        ret = http_client_call(r, c, method, params, result, error, err);
        client_close(c);
        return ret;
}

/* The reference runtime lets a command run 300 s (SANDBOX_EXEC_TIMEOUT_SECONDS). */
#define AGENT_EXEC_TIMEOUT_S 300
/* The reference keeps all of a command's output; nsboxd keeps this much of
 * each stream, and a cut is said in stderr. */
#define AGENT_MAX_OUTPUT (64u << 20)

/* X-Sandbox-Timeout: the seconds the SDK (and its router) wait for the
 * answer, a positive number ("5", "2.5"); the command gets a second less
 * (at least one), so that its answer arrives while they still wait; 0
 * when absent or not a number. */
static unsigned header_timeout(struct http_request *r)
{
        const char *v = MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, "X-Sandbox-Timeout");
        if (v == NULL)
                return 0;
        char *end;
        double t = strtod(v, &end);
        if (end == v || *end != '\0' || !(t > 0) || t > 86400)
                return 0;
        unsigned s = (unsigned)t;
        return s >= 2 ? s - 1 : 1;
}

/* stderr, then a line of its own saying what happened to the command. */
static json_t *stderr_with(json_t *stderr_json, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *stderr_with(json_t *stderr_json, const char *fmt, ...)
{
        const char *text = json_string_value(stderr_json) ?: "";
        size_t n = strlen(text);
        char note[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(note, sizeof(note), fmt, ap);
        va_end(ap);
        _cleanup_free_ char *out = NULL;
        if (asprintf(&out, "%s%s%s", text, n > 0 && text[n - 1] != '\n' ? "\n" : "", note) < 0)
                return NULL;
        return json_string(out);
}

enum MHD_Result http_agent_execute(struct http_request *r, json_t *body)
{
        json_t *command = json_object_get(body, "command");
        if (!json_is_string(command) || json_string_length(command) == 0)
                return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                        "command must be a non-empty string");
        /* The body's timeout, else the one the client waits (X-Sandbox-Timeout:
         * nobody reads an answer after it), else the reference's 300 s. */
        json_t *timeout = json_object_get(body, "timeout");
        unsigned seconds = header_timeout(r);
        if (json_is_integer(timeout) && json_integer_value(timeout) > 0 &&
            json_integer_value(timeout) <= 86400)
                seconds = (unsigned)json_integer_value(timeout);
        if (seconds == 0)
                seconds = AGENT_EXEC_TIMEOUT_S;
        _cleanup_json_ json_t *params =
            json_pack("{s:O, s:s, s:I, s:I}", "command", command, "cwd", "/workspace", "timeout_seconds",
                      (json_int_t)seconds, "max_output_bytes", (json_int_t)AGENT_MAX_OUTPUT);
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        if (call_in_default(r, "sandbox.exec", params, &result, &error, &err) < 0)
                return http_reply_rpc_error(r, error, err);
        json_t *exit_code = json_object_get(result, "exit_code");
        /* killed by a signal: the shell's convention, 128 + signal */
        json_int_t code = json_is_integer(exit_code)
                              ? json_integer_value(exit_code)
                              : 128 + json_integer_value(json_object_get(result, "signal"));
        json_t *stderr_json = json_incref(json_object_get(result, "stderr"));
        bool timed_out = json_is_true(json_object_get(result, "timed_out"));
        if (timed_out) { /* the reference's words replace nsboxd's, below */
                const char *text = json_string_value(stderr_json) ?: "";
                json_t *own = json_stringn(text, http_stderr_without_nsbox_note(text));
                json_decref(stderr_json);
                stderr_json = own;
        }
        if (json_is_true(json_object_get(result, "truncated"))) {
                json_t *more = stderr_with(stderr_json, "[nsbox: output cut at %u MiB a stream]\n",
                                           AGENT_MAX_OUTPUT >> 20);
                json_decref(stderr_json);
                stderr_json = more;
        }
        if (timed_out) {
                /* as the reference runtime: the command failed, exit code 1, and stderr says why
                 * (in its words, instead of nsboxd's) */
                json_t *more = stderr_with(stderr_json, "execution timed out after %u seconds\n", seconds);
                json_decref(stderr_json);
                stderr_json = more;
                code = 1;
        }
        json_t *answer = json_pack("{s:O, s:o, s:I}", "stdout", json_object_get(result, "stdout"), "stderr",
                                   stderr_json ?: json_string(""), "exit_code", code);
        if (answer != NULL && timed_out)
                json_object_set_new(answer, "timed_out", json_true());
        return http_reply_json(r, MHD_HTTP_OK, answer);
}

/* POST /execute_command_stateful {code, language?: "python", timeout?: 10}:
 * the runtime's kernel, here the default sandbox's persistent interpreter
 * (python.run stateful); a trailing expression's value ends stdout, as the
 * kernel's execute_result did. */
enum MHD_Result http_agent_execute_stateful(struct http_request *r, json_t *body)
{
        json_t *code = json_object_get(body, "code"), *language = json_object_get(body, "language"),
               *timeout = json_object_get(body, "timeout");
        if (!json_is_string(code) || json_string_length(code) == 0)
                return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                        "code must be a non-empty string");
        if (language != NULL &&
            (!json_is_string(language) || strcmp(json_string_value(language), "python") != 0))
                return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                        "language must be \"python\"");
        if (timeout != NULL && (!json_is_integer(timeout) || json_integer_value(timeout) <= 0 ||
                                json_integer_value(timeout) > 86400))
                return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                        "timeout must be an integer from 1 to 86400");
        _cleanup_json_ json_t *params =
            json_pack("{s:O, s:b, s:I}", "code", code, "stateful", 1, "timeout_seconds",
                      timeout ? json_integer_value(timeout) : (json_int_t)10);
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        if (call_in_default(r, "python.run", params, &result, &error, &err) < 0)
                return http_reply_rpc_error(r, error, err);
        const char *stdout_text = json_string_value(json_object_get(result, "stdout")) ?: "";
        const char *value = json_string_value(json_object_get(result, "result"));
        _cleanup_free_ char *out = NULL;
        if (asprintf(&out, "%s%s", stdout_text, value ? value : "") < 0)
                return MHD_NO;
        const char *status = json_string_value(json_object_get(result, "status"));
        return http_reply_json(r, MHD_HTTP_OK,
                               json_pack("{s:s, s:O, s:i}", "stdout", out, "stderr",
                                         json_object_get(result, "stderr"), "exit_code",
                                         status && strcmp(status, "ok") == 0 ? 0 : 1));
}

/* GET /v1/metadata, as sandboxd answers it: {env: {NAME: value}}, the
 * SANDBOX_* variables the orchestrator gave this process, without any
 * whose name suggests a credential (the sandbox's code may ask too). */
enum MHD_Result http_agent_metadata(struct http_request *r)
{
        static const char *const secret[] = { "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CRED", "KEY",
                                              "AUTH",  "BEARER", "PRIVATE",  "CERT",   NULL };
        json_t *env = json_object();
        for (char **e = environ; e && *e; e++) {
                const char *eq = strchr(*e, '=');
                if (eq == NULL || strncmp(*e, "SANDBOX_", 8) != 0 || (size_t)(eq - *e) > 255)
                        continue;
                char name[256];
                memcpy(name, *e, (size_t)(eq - *e));
                name[eq - *e] = '\0';
                bool hidden = false;
                for (size_t i = 0; secret[i] && !hidden; i++)
                        hidden = strcasestr(name, secret[i]) != NULL;
                if (!hidden)
                        json_object_set_new(env, name, json_string(eq + 1));
        }
        return http_reply_json(r, MHD_HTTP_OK, json_pack("{s:o}", "env", env));
}

/* --- paths ----------------------------------------------------------------- */

/* The runtime's base directory: every path of the contract is under it, as
 * the reference runtime's (its /app, SANDBOX_BASE_DIR) and sandboxd's root
 * are: "/" and "" are the base itself, "/a" is BASE/a. */
#define AGENT_BASE "/workspace"

/* The sandbox path of a contract path: BASE joined with it, ".", ".." and
 * empty parts resolved by name, as the reference's realpath does; false
 * when it leaves BASE or has a control character. */
static bool base_path(const char *in, char *out, size_t size)
{
        size_t len = strlen(AGENT_BASE);
        if (size <= len)
                return false;
        memcpy(out, AGENT_BASE, len + 1);
        for (const char *p = in; *p;) {
                const char *end = strchr(p, '/');
                size_t n = end ? (size_t)(end - p) : strlen(p);
                for (size_t i = 0; i < n; i++)
                        if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
                                return false;
                if (n == 2 && p[0] == '.' && p[1] == '.') {
                        char *slash = strrchr(out, '/');
                        len = slash ? (size_t)(slash - out) : 0;
                        out[len] = '\0';
                } else if (n > 0 && !(n == 1 && p[0] == '.')) {
                        if (len + 1 + n + 1 > size)
                                return false;
                        out[len++] = '/';
                        memcpy(out + len, p, n);
                        len += n;
                        out[len] = '\0';
                }
                p += n;
                if (*p == '/')
                        p++;
        }
        size_t base = strlen(AGENT_BASE);
        return strncmp(out, AGENT_BASE, base) == 0 && (out[base] == '\0' || out[base] == '/');
}

/* --- POST /upload, PUT /v1/files ------------------------------------------- */

/* A call of the upload. Those on its temporary file run to their end (a
 * piece is at most UPLOAD_CHUNK): one cut short by the HTTP client's leaving
 * would go on in nsboxd and could make the file again after its removal,
 * which goes on the same connection, after them. A whole file in one
 * fs.write ends with its client, and nsboxd leaves nothing of it. */
static int upload_call(struct http_upload *u, const char *method, json_t *params, json_t **result)
{
        if (u->staged[0] != '\0')
                return client_call(u->c, method, params, NULL, NULL, result, &u->error, &u->err);
        return http_client_call(u->r, u->c, method, params, result, &u->error, &u->err);
}

/* Write what is buffered: the whole file when it is the first and the last
 * piece, else a piece of the temporary file (renamed into place after the
 * last). */
static int upload_flush(struct http_upload *u, bool last)
{
        if (u->failed)
                return -1;
        if (u->c == NULL && connect_default(u->r, &u->c, u->id, &u->error, &u->err) < 0) {
                u->failed = true;
                return -1;
        }
        int r;
        if (!u->started && !last && (r = staging_path(u->path, u->staged, sizeof(u->staged))) < 0) {
                u->staged[0] = '\0';
                nsbox_error(&u->err, -r, "a temporary name beside %s", u->path);
                u->failed = true;
                return -1;
        }
        _cleanup_free_ char *text = base64_encode(u->data ? u->data : "", u->len, NULL);
        _cleanup_json_ json_t *p = json_pack("{s:s, s:s, s:s, s:s, s:b}", "sandbox_id", u->id, "path",
                                             u->staged[0] ? u->staged : u->path, "content", text ? text : "",
                                             "encoding", "base64", "append", u->started);
        _cleanup_json_ json_t *res = NULL;
        if (text == NULL || p == NULL) {
                nsbox_error(&u->err, ENOMEM, "upload");
                u->failed = true;
                return -1;
        }
        if (upload_call(u, "fs.write", p, &res) < 0) {
                u->failed = true;
                return -1;
        }
        u->started = true;
        u->written += u->len;
        u->len = 0;
        if (!last || u->staged[0] == '\0')
                return 0;
        _cleanup_json_ json_t *move = json_pack("{s:s, s:s, s:s, s:b}", "sandbox_id", u->id, "from",
                                                u->staged, "to", u->path, "overwrite", true);
        _cleanup_json_ json_t *moved = NULL;
        if (move == NULL || upload_call(u, "fs.rename", move, &moved) < 0) {
                u->failed = true;
                return -1;
        }
        u->staged[0] = '\0';
        return 0;
}

/* An upload that did not end in place: its temporary file goes, on the
 * upload's connection, after every call on it (upload_call). */
static void upload_discard(struct http_upload *u)
{
        if (u->staged[0] == '\0' || u->c == NULL)
                return;
        _cleanup_json_ json_t *error = NULL, *result = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *p = json_pack("{s:s, s:s}", "sandbox_id", u->id, "path", u->staged);
        if (p != NULL)
                client_call(u->c, "fs.remove", p, NULL, NULL, &result, &error, &err);
        u->staged[0] = '\0';
}

static void upload_bytes(struct http_upload *u, const char *data, size_t size)
{
        while (size > 0 && !u->failed && !u->denied) {
                size_t room = UPLOAD_CHUNK - u->len, n = size < room ? size : room;
                if (u->data == NULL && (u->data = malloc(UPLOAD_CHUNK)) == NULL) {
                        nsbox_error(&u->err, ENOMEM, "upload");
                        u->failed = true;
                        return;
                }
                memcpy(u->data + u->len, data, n);
                u->len += n;
                data += n;
                size -= n;
                if (u->len == UPLOAD_CHUNK)
                        upload_flush(u, false);
        }
}

/* The destination, once: a path under the base directory, or denied. */
static void upload_destination(struct http_upload *u, const char *name)
{
        u->filename = strdup(name);
        if (u->filename == NULL) {
                nsbox_error(&u->err, ENOMEM, "upload");
                u->failed = true;
        } else if (!base_path(name, u->path, sizeof(u->path)) || strcmp(u->path, AGENT_BASE) == 0) {
                u->denied = true;
        }
}

static enum MHD_Result upload_part(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                                   const char *content_type, const char *transfer_encoding, const char *data,
                                   uint64_t off, size_t size)
{
        struct http_upload *u = cls;
        if (key == NULL || strcmp(key, "file") != 0)
                return MHD_YES; /* other form fields are not ours */
        if (off == 0 && u->filename != NULL && (filename == NULL || strcmp(filename, u->filename) != 0))
                u->second_file = true;
        if (u->second_file)
                return MHD_YES;
        if (u->filename == NULL)
                upload_destination(u, filename ? filename : "");
        upload_bytes(u, data, size);
        return MHD_YES; /* a failure is answered once the body ends */
}

static struct http_upload *upload_of(struct http_request *r)
{
        if (r->upload == NULL) {
                r->upload = calloc(1, sizeof(*r->upload));
                if (r->upload == NULL)
                        return NULL;
                r->upload->r = r;
        }
        return r->upload;
}

int http_agent_upload_feed(struct http_request *r, const char *data, size_t len)
{
        struct http_upload *u = upload_of(r);
        if (u == NULL)
                return -ENOMEM;
        if (u->pp == NULL && !u->not_form) {
                /* MHD parses multipart/form-data; NULL: not a form */
                u->pp = MHD_create_post_processor(r->connection, 65536, upload_part, u);
                u->not_form = u->pp == NULL;
        }
        if (u->not_form || u->failed || u->denied)
                return 0; /* answered at the end */
        if (MHD_post_process(u->pp, data, len) != MHD_YES)
                u->not_form = true;
        return 0;
}

int http_agent_put_feed(struct http_request *r, const char *path, const char *data, size_t len)
{
        struct http_upload *u = upload_of(r);
        if (u == NULL)
                return -ENOMEM;
        if (u->filename == NULL)
                upload_destination(u, path);
        upload_bytes(u, data, len);
        return 0;
}

void http_agent_upload_free(struct http_upload *u)
{
        if (u == NULL)
                return;
        if (u->pp != NULL)
                MHD_destroy_post_processor(u->pp);
        upload_discard(u);
        client_close(u->c);
        json_decref(u->error);
        nsbox_error_free(&u->err);
        free(u->filename);
        free(u->data);
        free(u);
}

static enum MHD_Result access_denied(struct http_request *r, bool v1)
{
        if (v1)
                return http_reply_json(r, MHD_HTTP_FORBIDDEN,
                                       json_pack("{s:s, s:s}", "code", "PERMISSION_DENIED", "message",
                                                 "path traversal outside sandbox root is forbidden"));
        return http_reply_json(r, MHD_HTTP_FORBIDDEN, json_pack("{s:s}", "message", "Access denied"));
}

/* Write the rest of the file: true, or false with *ret the answer to what went wrong. */
static bool upload_end(struct http_request *r, struct http_upload *u, bool v1, enum MHD_Result *ret)
{
        if (u->denied) {
                *ret = access_denied(r, v1);
                return false;
        }
        if (!u->failed && (u->len > 0 || !u->started || u->staged[0] != '\0'))
                upload_flush(u, true);
        if (u->failed) {
                /* Gone before the answer, so that a client reading the
                 * directory after a refusal finds nothing of it. */
                upload_discard(u);
                *ret = http_reply_rpc_error(r, u->error, u->err);
                return false;
        }
        return true;
}

enum MHD_Result http_agent_upload_finish(struct http_request *r)
{
        struct http_upload *u = r->upload;
        if (u == NULL || u->not_form || u->filename == NULL)
                return http_reply_error(
                    r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                    "send multipart/form-data with one part named \"file\" whose filename is "
                    "the destination");
        if (u->second_file)
                return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params", "one file per upload");
        enum MHD_Result ret;
        if (!upload_end(r, u, false, &ret))
                return ret;
        char message[4200];
        snprintf(message, sizeof(message), "File '%s' uploaded successfully.", u->filename);
        return http_reply_json(r, MHD_HTTP_OK, json_pack("{s:s}", "message", message));
}

/* --- files ----------------------------------------------------------------- */

static double timestamp_seconds(const char *rfc3339)
{
        struct tm tm = { 0 };
        int ms = 0;
        if (rfc3339 == NULL)
                return 0;
        const char *end = strptime(rfc3339, "%Y-%m-%dT%H:%M:%S", &tm);
        if (end == NULL)
                return 0;
        if (*end == '.')
                ms = atoi(end + 1);
        return (double)timegm(&tm) + ms / 1000.0;
}

/* Whether a JSON-RPC error object's data.errno names errnum (e.g. "ENOTDIR"). */
static bool rpc_error_errno_is(json_t *error, const char *errnum)
{
        const char *e = json_string_value(json_object_get(json_object_get(error, "data"), "errno"));
        return e != NULL && strcmp(e, errnum) == 0;
}

static const char *entry_type(json_t *entry)
{
        const char *t = json_string_value(json_object_get(entry, "type"));
        return t && strcmp(t, "dir") == 0 ? "directory" : "file";
}

static enum MHD_Result reply_message(struct http_request *r, unsigned status, const char *message)
{
        return http_reply_json(r, status, json_pack("{s:s}", "message", message));
}

/* A file's bytes go out as read, DOWNLOAD_CHUNK at a time over one nsboxd
 * connection (fs.read with an offset): a download holds a chunk, never the
 * whole file (a 60 MB file held 240 MB of nsbox-http as base64, JSON and
 * bytes at once, and a file past fs.read's 64 MiB was cut short). */
#define DOWNLOAD_CHUNK (4u << 20)

struct download {
        struct client *c;
        char id[64];
        char *path;
        uint64_t offset; /* of the next chunk */
        bool more;       /* nsboxd said the file goes on past the chunk */
        char *chunk;
        size_t chunk_len, chunk_off;
};

static void download_free(void *data)
{
        struct download *d = data;
        client_close(d->c);
        free(d->path);
        free(d->chunk);
        free(d);
}

static int download_next(struct download *d, json_t **error, nsbox_error_t **err)
{
        _cleanup_json_ json_t *p =
            json_pack("{s:s, s:s, s:s, s:I, s:I}", "sandbox_id", d->id, "path", d->path, "encoding", "base64",
                      "offset", (json_int_t)d->offset, "max_bytes", (json_int_t)DOWNLOAD_CHUNK);
        _cleanup_json_ json_t *res = NULL;
        int r = client_call(d->c, "fs.read", p, NULL, NULL, &res, error, err);
        if (r < 0)
                return r;
        json_t *content = json_object_get(res, "content");
        size_t len = 0;
        char *bytes = base64_decode(json_string_value(content) ?: "", json_string_length(content), &len);
        if (bytes == NULL)
                return nsbox_error(err, EPROTO, "nsboxd sent bad base64");
        free(d->chunk);
        d->chunk = bytes;
        d->chunk_len = len;
        d->chunk_off = 0;
        d->offset += len;
        d->more = len > 0 && json_is_true(json_object_get(res, "truncated"));
        return 0;
}

static ssize_t download_read(void *data, uint64_t pos, char *buf, size_t max)
{
        struct download *d = data;
        if (d->chunk_off == d->chunk_len) {
                if (!d->more)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                _cleanup_error_ nsbox_error_t *err = NULL;
                _cleanup_json_ json_t *error = NULL;
                if (download_next(d, &error, &err) < 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR; /* e.g. removed meanwhile */
                if (d->chunk_len == 0)
                        return MHD_CONTENT_READER_END_OF_STREAM;
        }
        size_t n = d->chunk_len - d->chunk_off < max ? d->chunk_len - d->chunk_off : max;
        memcpy(buf, d->chunk + d->chunk_off, n);
        d->chunk_off += n;
        return (ssize_t)n;
}

static enum MHD_Result download(struct http_request *r, const char *path)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *error = NULL;
        struct download *d = calloc(1, sizeof(*d));
        if (d == NULL || (d->path = strdup(path)) == NULL) {
                free(d);
                return MHD_NO;
        }
        /* The first chunk before the status: its errors are the answer. */
        if (connect_default(r, &d->c, d->id, &error, &err) < 0 || download_next(d, &error, &err) < 0) {
                download_free(d);
                return http_reply_rpc_error(r, error, err);
        }
        if (!d->more) {
                /* all of it in one chunk */
                enum MHD_Result ret =
                    http_reply_bytes(r, MHD_HTTP_OK, "application/octet-stream", d->chunk, d->chunk_len);
                d->chunk = NULL;
                download_free(d);
                return ret;
        }
        return http_reply_stream(r, "application/octet-stream", download_read, d, download_free);
}

enum MHD_Result http_agent_files(struct http_request *r, const char *kind, const char *asked)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        bool v1 = strncmp(kind, "v1.", 3) == 0;
        enum MHD_Result ret;

        if (strcmp(kind, "v1.put") == 0) {
                struct http_upload *u = r->upload;
                if (u == NULL) /* an empty body */
                        http_agent_put_feed(r, asked, "", 0);
                if ((u = r->upload) == NULL)
                        return MHD_NO;
                if (!upload_end(r, u, true, &ret))
                        return ret;
                return http_reply_json(
                    r, MHD_HTTP_OK, json_pack("{s:s, s:I}", "path", asked, "size", (json_int_t)u->written));
        }
        char where[4200];
        if (!base_path(asked, where, sizeof(where)))
                return access_denied(r, v1);
        const char *path = where;
        if (strcmp(kind, "v1.delete") == 0) {
                const char *recursive =
                    MHD_lookup_connection_value(r->connection, MHD_GET_ARGUMENT_KIND, "recursive");
                _cleanup_json_ json_t *p = json_pack("{s:s, s:b}", "path", path, "recursive",
                                                     recursive && strcmp(recursive, "true") == 0);
                if (call_in_default(r, "fs.remove", p, &result, &error, &err) < 0) {
                        const char *message = json_string_value(json_object_get(error, "message"));
                        /* a directory with contents, without recursive */
                        if (rpc_error_errno_is(error, "ENOTEMPTY"))
                                return http_reply_error(r, MHD_HTTP_CONFLICT, "busy", "%s", message ?: "");
                        return http_reply_rpc_error(r, error, err);
                }
                return http_reply_json(r, MHD_HTTP_OK, json_pack("{s:s, s:b}", "path", path, "deleted", 1));
        }

        _cleanup_json_ json_t *p = json_pack("{s:s}", "path", path);
        if (call_in_default(r, "fs.stat", p, &result, &error, &err) < 0) {
                const char *ekind;
                unsigned status = error ? http_status_of_rpc_error(error, &ekind) : 0;
                if (strcmp(kind, "exists") == 0 && status == MHD_HTTP_NOT_FOUND)
                        return http_reply_json(r, MHD_HTTP_OK,
                                               json_pack("{s:s, s:b}", "path", asked, "exists", 0));
                if (status == MHD_HTTP_NOT_FOUND && strcmp(kind, "download") == 0)
                        return reply_message(r, MHD_HTTP_NOT_FOUND, "File not found");
                if (status == MHD_HTTP_NOT_FOUND && strcmp(kind, "v1.head") == 0)
                        return http_reply_bytes(r, MHD_HTTP_NOT_FOUND, "application/json", strdup(""), 0);
                return http_reply_rpc_error(r, error, err);
        }
        bool dir = strcmp(entry_type(result), "directory") == 0;
        if (strcmp(kind, "exists") == 0)
                return http_reply_json(r, MHD_HTTP_OK, json_pack("{s:s, s:b}", "path", asked, "exists", 1));
        _cleanup_json_ json_t *listing = NULL;
        const char *raw_type = json_string_value(json_object_get(result, "type"));
        if (raw_type != NULL && strcmp(raw_type, "symlink") == 0) {
                /* As ls and cat do, the target decides (fs.stat describes the
                 * link itself): a link to a directory lists, to a file reads. */
                _cleanup_json_ json_t *lp = json_pack("{s:s}", "path", path);
                if (call_in_default(r, "fs.list", lp, &listing, &error, &err) == 0) {
                        dir = true;
                } else if (!rpc_error_errno_is(error, "ENOTDIR") && !rpc_error_errno_is(error, "ENOENT")) {
                        return http_reply_rpc_error(r, error, err);
                } else {
                        json_decref(error);
                        error = NULL;
                        nsbox_error_free(&err);
                }
        }
        if (strcmp(kind, "v1.head") == 0)
                return http_reply_bytes(r, MHD_HTTP_OK, dir ? "application/json" : "application/octet-stream",
                                        strdup(""), 0);
        if (strcmp(kind, "list") == 0 || (v1 && dir)) {
                if (!dir)
                        return reply_message(r, MHD_HTTP_NOT_FOUND, "Path is not a directory");
                json_decref(result);
                result = steal_pointer(&listing);
                _cleanup_json_ json_t *lp = json_pack("{s:s}", "path", path);
                if (result == NULL && call_in_default(r, "fs.list", lp, &result, &error, &err) < 0)
                        return http_reply_rpc_error(r, error, err);
                _cleanup_json_ json_t *entries = json_array();
                size_t i;
                json_t *e;
                json_array_foreach(json_object_get(result, "entries"), i, e)
                {
                        json_t *name = json_object_get(e, "name"), *size = json_object_get(e, "size");
                        const char *mtime = json_string_value(json_object_get(e, "mtime"));
                        if (v1) {
                                char mode[16];
                                snprintf(mode, sizeof(mode), "%04llo",
                                         (unsigned long long)json_integer_value(json_object_get(e, "mode")));
                                json_array_append_new(entries,
                                                      json_pack("{s:O, s:O, s:s, s:s, s:s}", "name", name,
                                                                "size", size, "type", entry_type(e),
                                                                "modified_at", mtime ?: "", "mode", mode));
                        } else {
                                json_array_append_new(entries,
                                                      json_pack("{s:O, s:O, s:s, s:f}", "name", name, "size",
                                                                size, "type", entry_type(e), "mod_time",
                                                                timestamp_seconds(mtime)));
                        }
                }
                if (v1)
                        return http_reply_json(r, MHD_HTTP_OK,
                                               json_pack("{s:s, s:O}", "path", path, "entries", entries));
                return http_reply_json(r, MHD_HTTP_OK, json_incref(entries));
        }
        /* download, or v1 GET of a file: the bytes */
        if (dir)
                return reply_message(r, MHD_HTTP_NOT_FOUND, "File not found");
        return download(r, path);
}
