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
 * and kept. Relative paths are under /workspace (where the runtime had /app). */
#include "agent_sandbox.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "json_cleanup.h"
#include "nsboxd.h"
#include "relpath.h"
#include "reply.h"
#include "textenc.h"

#define DEFAULT_SESSION "http-default"

struct http_upload {
        struct MHD_PostProcessor *pp;
        char *filename;
        char *data;
        size_t len, cap;
        bool second_file; /* more than one file part: refused */
        bool failed;
};

/* The default sandbox of the request's owner (made on first use). */
static int default_sandbox(struct client *c, char *id, size_t id_len, json_t **error, nsbox_error_t **err)
{
        _cleanup_json_ json_t *params = json_pack("{s:s}", "session_id", DEFAULT_SESSION);
        _cleanup_json_ json_t *result = NULL;
        *error = NULL;
        int r = client_call(c, "sandbox.create", params, NULL, NULL, &result, error, err);
        if (r < 0)
                return r;
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
        if ((ret = default_sandbox(c, id, 64, error, err)) < 0) {
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
        ret = client_call(c, method, params, NULL, NULL, result, error, err);
        client_close(c);
        return ret;
}

enum MHD_Result http_agent_execute(struct http_request *r, json_t *body)
{
        json_t *command = json_object_get(body, "command");
        if (!json_is_string(command) || json_string_length(command) == 0)
                return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                        "command must be a non-empty string");
        json_t *timeout = json_object_get(body, "timeout");
        _cleanup_json_ json_t *params = json_pack("{s:O, s:s}", "command", command, "cwd", "/workspace");
        if (json_is_integer(timeout) && json_integer_value(timeout) > 0)
                json_object_set(params, "timeout_seconds", timeout);
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        if (call_in_default(r, "sandbox.exec", params, &result, &error, &err) < 0)
                return http_reply_rpc_error(r, error, err);
        json_t *exit_code = json_object_get(result, "exit_code");
        /* killed by a signal: the shell's convention, 128 + signal */
        json_int_t code = json_is_integer(exit_code)
                              ? json_integer_value(exit_code)
                              : 128 + json_integer_value(json_object_get(result, "signal"));
        return http_reply_json(r, MHD_HTTP_OK,
                               json_pack("{s:O, s:O, s:I}", "stdout", json_object_get(result, "stdout"),
                                         "stderr", json_object_get(result, "stderr"), "exit_code", code));
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

/* --- POST /upload ---------------------------------------------------------- */

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
        if (u->filename == NULL) {
                u->filename = strdup(filename ? filename : "");
                if (u->filename == NULL) {
                        u->failed = true;
                        return MHD_NO;
                }
        }
        if (http_buffer_append(&u->data, &u->len, &u->cap, data, size) < 0) {
                u->failed = true;
                return MHD_NO;
        }
        return MHD_YES;
}

int http_agent_upload_feed(struct http_request *r, const char *data, size_t len)
{
        if (r->upload == NULL) {
                r->upload = calloc(1, sizeof(*r->upload));
                if (r->upload == NULL)
                        return -ENOMEM;
                /* MHD parses multipart/form-data; NULL: not a form */
                r->upload->pp = MHD_create_post_processor(r->connection, 65536, upload_part, r->upload);
                if (r->upload->pp == NULL)
                        r->upload->failed = true;
        }
        if (r->upload->failed)
                return 0; /* answered 400 at the end */
        if (MHD_post_process(r->upload->pp, data, len) != MHD_YES)
                r->upload->failed = true;
        return 0;
}

void http_agent_upload_free(struct http_upload *u)
{
        if (u == NULL)
                return;
        if (u->pp != NULL)
                MHD_destroy_post_processor(u->pp);
        free(u->filename);
        free(u->data);
        free(u);
}

/* Write bytes to a path of the default sandbox, its directories made first. */
static int write_file(struct http_request *r, const char *path, const char *data, size_t len, json_t **error,
                      nsbox_error_t **err)
{
        _cleanup_free_ char *text = base64_encode(data, len, NULL);
        if (text == NULL)
                return nsbox_error(err, ENOMEM, "upload");
        struct client *c = NULL;
        char id[64];
        int ret = connect_default(r, &c, id, error, err);
        if (ret < 0)
                return ret;
        ret = http_sandbox_write(c, id, path, text, error, err);
        client_close(c);
        return ret;
}

enum MHD_Result http_agent_upload_finish(struct http_request *r)
{
        struct http_upload *u = r->upload;
        if (u == NULL || u->failed || u->filename == NULL)
                return http_reply_error(
                    r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                    "send multipart/form-data with one part named \"file\" whose filename is "
                    "the destination");
        if (u->second_file)
                return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params", "one file per upload");
        /* no ".." part: the SDK sends a path under the runtime's base; absolute, "./a" or "a//b"
         * are taken as the sandbox's path walk reads them */
        if (!relpath_ok(u->filename, RELPATH_ABSOLUTE | RELPATH_LOOSE))
                return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                        "the filename must be a path without \"..\" or control characters");
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *error = NULL;
        if (write_file(r, u->filename, u->data ? u->data : "", u->len, &error, &err) < 0)
                return http_reply_rpc_error(r, error, err);
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

enum MHD_Result http_agent_files(struct http_request *r, const char *kind, const char *path)
{
        if (path[0] == '\0')
                path = "/workspace";
        for (const char *p = path; *p; p++)
                if ((unsigned char)*p < 0x20)
                        return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params", "bad path");
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        bool v1 = strncmp(kind, "v1.", 3) == 0;

        if (strcmp(kind, "v1.put") == 0) {
                if (write_file(r, path, r->body ? r->body : "", r->body_len, &error, &err) < 0)
                        return http_reply_rpc_error(r, error, err);
                return http_reply_json(
                    r, MHD_HTTP_OK, json_pack("{s:s, s:I}", "path", path, "size", (json_int_t)r->body_len));
        }
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
                        return http_reply_json(r, MHD_HTTP_OK, json_pack("{s:b}", "exists", 0));
                if (status == MHD_HTTP_NOT_FOUND && strcmp(kind, "download") == 0)
                        return reply_message(r, MHD_HTTP_NOT_FOUND, "File not found");
                if (status == MHD_HTTP_NOT_FOUND && strcmp(kind, "v1.head") == 0)
                        return http_reply_bytes(r, MHD_HTTP_NOT_FOUND, "application/json", strdup(""), 0);
                return http_reply_rpc_error(r, error, err);
        }
        bool dir = strcmp(entry_type(result), "directory") == 0;
        if (strcmp(kind, "exists") == 0)
                return http_reply_json(r, MHD_HTTP_OK, json_pack("{s:b}", "exists", 1));
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
                        return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                                "%s is not a directory", path);
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
