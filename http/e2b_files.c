/* SPDX-License-Identifier: Apache-2.0 */
/* envd's files (e2b_files.h) on nsboxd's fs.* methods. Paths are the
 * sandbox's, as nsbox's: a relative one is under /workspace. */
#include "e2b_files.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "e2b_watch.h"
#include "e2b_wire.h"
#include "json_cleanup.h"
#include "nsboxd.h"
#include "reply.h"
#include "textenc.h"

/* GET /files reads at most this (nsboxd's fs.read bound). */
#define FILES_MAX_READ (64u << 20)
/* ListDir walks at most this deep and returns at most this many entries. */
#define LIST_MAX_DEPTH   32
#define LIST_MAX_ENTRIES 100000

static const char *query(struct http_request *r, const char *key)
{
        return MHD_lookup_connection_value(r->connection, MHD_GET_ARGUMENT_KIND, key);
}

/* envd's REST errors: {code, message} with the status. */
static enum MHD_Result files_error(struct http_request *r, json_t *error, const nsbox_error_t *err)
{
        return e2b_reply_rest_rpc_error(r, error, err);
}

static enum MHD_Result download(struct http_request *r, const char *sandbox_id, const char *path)
{
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:s, s:s, s:I}", "sandbox_id", sandbox_id, "path", path, "encoding", "base64",
                      "max_bytes", (json_int_t)FILES_MAX_READ);
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "fs.read", params, &result, &error, &err) < 0)
                return files_error(r, error, err);
        if (json_is_true(json_object_get(result, "truncated")))
                return e2b_reply_rest_error(r, 413, "%s is larger than %u bytes", path, FILES_MAX_READ);
        const char *content = json_string_value(json_object_get(result, "content"));
        size_t len = 0;
        void *bytes = content ? base64_decode(content, strlen(content), &len) : NULL;
        if (bytes == NULL)
                return e2b_reply_rest_error(r, 500, "nsboxd's content of %s is not base64", path);
        return http_reply_bytes(r, MHD_HTTP_OK, "application/octet-stream", bytes, len);
}

/* The one file part of a multipart/form-data body: its bytes in place. */
static int multipart_file(struct http_request *r, const char *type, const char **data, size_t *len)
{
        const char *b = strcasestr(type, "boundary=");
        if (b == NULL)
                return -EINVAL;
        b += 9;
        char boundary[256];
        size_t blen = strcspn(b, "; ");
        if (*b == '"') {
                b++;
                blen = strcspn(b, "\"");
        }
        if (blen == 0 || blen + 4 >= sizeof(boundary))
                return -EINVAL;
        snprintf(boundary, sizeof(boundary), "\r\n--%.*s", (int)blen, b);
        const char *body = r->body, *end = r->body + r->body_len;
        /* the first boundary has no CRLF before it */
        if (r->body_len < blen + 2 || memcmp(body, boundary + 2, blen + 2) != 0)
                return -EINVAL;
        const char *head = body + blen + 2;
        const char *start = memmem(head, (size_t)(end - head), "\r\n\r\n", 4);
        if (start == NULL)
                return -EINVAL;
        start += 4;
        const char *stop = memmem(start, (size_t)(end - start), boundary, strlen(boundary));
        if (stop == NULL)
                return -EINVAL;
        *data = start;
        *len = (size_t)(stop - start);
        return 0;
}

static enum MHD_Result upload(struct http_request *r, const char *sandbox_id, const char *path)
{
        const char *type =
            MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        const char *data = r->body;
        size_t len = r->body_len;
        if (type != NULL && strncasecmp(type, "multipart/form-data", 19) == 0 &&
            multipart_file(r, type, &data, &len) < 0)
                return e2b_reply_rest_error(r, 400, "the multipart body holds no file part");
        size_t b64_len = 0;
        _cleanup_free_ char *b64 = base64_encode(data ? data : "", len, &b64_len);
        if (b64 == NULL)
                return e2b_reply_rest_error(r, 500, "out of memory");
        struct client *c = NULL;
        _cleanup_json_ json_t *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_nsboxd_connect(r, &c, &error, &err) < 0)
                return files_error(r, error, err);
        int ret = http_sandbox_write(c, sandbox_id, path, b64, &error, &err);
        client_close(c);
        if (ret < 0)
                return files_error(r, error, err);
        const char *slash = strrchr(path, '/');
        return http_reply_json(
            r, MHD_HTTP_OK,
            json_pack("[{s:s, s:s, s:s}]", "path", path, "name", slash ? slash + 1 : path, "type", "file"));
}

enum MHD_Result http_e2b_files(struct http_request *r, const char *sandbox_id)
{
        const char *path = query(r, "path");
        if (path == NULL || *path == '\0')
                return e2b_reply_rest_error(r, 400, "path is required");
        if (strcmp(r->method, "GET") == 0)
                return download(r, sandbox_id, path);
        if (strcmp(r->method, "POST") == 0)
                return upload(r, sandbox_id, path);
        return e2b_reply_rest_error(r, 405, "/files takes GET or POST");
}

static int call(struct http_request *r, const char *method, json_t *params, json_t **result, json_t **error,
                nsbox_error_t **err)
{
        return http_call(r, method, params, result, error, err);
}

/* {entry: EntryInfo} of a path, or an error queued (NULL). */
static json_t *stat_entry(struct http_request *r, const char *sandbox_id, const char *path,
                          enum MHD_Result *ret)
{
        _cleanup_json_ json_t *params = json_pack("{s:s, s:s}", "sandbox_id", sandbox_id, "path", path);
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (call(r, "fs.stat", params, &result, &error, &err) < 0) {
                *ret = e2b_reply_connect_rpc_error(r, error, err);
                return NULL;
        }
        return json_pack("{s:o}", "entry", e2b_entry_info(result, NULL));
}

static enum MHD_Result reply_stat(struct http_request *r, const char *sandbox_id, const char *path)
{
        enum MHD_Result ret = MHD_NO;
        json_t *entry = stat_entry(r, sandbox_id, path, &ret);
        return entry ? http_reply_json(r, MHD_HTTP_OK, entry) : ret;
}

/* Entries of dir and, while depth lasts, of its directories. */
static int list_into(struct http_request *r, struct client *c, const char *sandbox_id, const char *dir,
                     unsigned depth, json_t *out, json_t **error, nsbox_error_t **err)
{
        _cleanup_json_ json_t *params = json_pack("{s:s, s:s}", "sandbox_id", sandbox_id, "path", dir);
        _cleanup_json_ json_t *result = NULL;
        int ret = client_call(c, "fs.list", params, NULL, NULL, &result, error, err);
        if (ret < 0)
                return ret;
        const char *base = json_string_value(json_object_get(result, "path"));
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(result, "entries"), i, e)
        {
                if (json_array_size(out) >= LIST_MAX_ENTRIES)
                        return 0;
                json_t *info = e2b_entry_info(e, base ? base : dir);
                if (info == NULL)
                        return nsbox_error(err, ENOMEM, "list %s", dir);
                json_array_append_new(out, info);
                const char *type = json_string_value(json_object_get(e, "type"));
                if (depth > 1 && type != NULL && strcmp(type, "dir") == 0) {
                        const char *sub = json_string_value(json_object_get(info, "path"));
                        if ((ret = list_into(r, c, sandbox_id, sub, depth - 1, out, error, err)) < 0)
                                return ret;
                }
        }
        return 0;
}

static enum MHD_Result list_dir(struct http_request *r, const char *sandbox_id, const char *path, json_t *msg)
{
        json_t *d = json_object_get(msg, "depth");
        json_int_t depth = json_is_integer(d) ? json_integer_value(d) : 1;
        if (depth < 0 || depth > LIST_MAX_DEPTH)
                return e2b_reply_connect_error(r, "invalid_argument", "depth must be 0 to %d",
                                               LIST_MAX_DEPTH);
        struct client *c = NULL;
        _cleanup_json_ json_t *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_nsboxd_connect(r, &c, &error, &err) < 0)
                return e2b_reply_connect_rpc_error(r, error, err);
        _cleanup_json_ json_t *entries = json_array();
        int ret = list_into(r, c, sandbox_id, path, depth == 0 ? 1 : (unsigned)depth, entries, &error, &err);
        client_close(c);
        if (ret < 0)
                return e2b_reply_connect_rpc_error(r, error, err);
        return http_reply_json(r, MHD_HTTP_OK, json_pack("{s:O}", "entries", entries));
}

static enum MHD_Result make_dir(struct http_request *r, const char *sandbox_id, const char *path)
{
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:s, s:b}", "sandbox_id", sandbox_id, "path", path, "parents", 1);
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (call(r, "fs.mkdir", params, &result, &error, &err) < 0)
                return e2b_reply_connect_rpc_error(r, error, err);
        if (json_is_false(json_object_get(result, "created")))
                return e2b_reply_connect_error(r, "already_exists", "%s exists", path);
        return reply_stat(r, sandbox_id, path);
}

static enum MHD_Result move(struct http_request *r, const char *sandbox_id, json_t *msg)
{
        const char *from = json_string_value(json_object_get(msg, "source"));
        const char *to = json_string_value(json_object_get(msg, "destination"));
        if (from == NULL || to == NULL)
                return e2b_reply_connect_error(r, "invalid_argument", "Move wants source and destination");
        _cleanup_json_ json_t *params = json_pack("{s:s, s:s, s:s, s:b}", "sandbox_id", sandbox_id, "from",
                                                  from, "to", to, "overwrite", 1);
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (call(r, "fs.rename", params, &result, &error, &err) < 0)
                return e2b_reply_connect_rpc_error(r, error, err);
        return reply_stat(r, sandbox_id, to);
}

static enum MHD_Result remove_path(struct http_request *r, const char *sandbox_id, const char *path)
{
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:s, s:b}", "sandbox_id", sandbox_id, "path", path, "recursive", 1);
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (call(r, "fs.remove", params, &result, &error, &err) < 0)
                return e2b_reply_connect_rpc_error(r, error, err);
        return http_reply_json(r, MHD_HTTP_OK, json_object());
}

enum MHD_Result http_e2b_filesystem(struct http_request *r, const char *sandbox_id, const char *method)
{
        bool stream = strcmp(method, "WatchDir") == 0;
        char why[256];
        _cleanup_json_ json_t *msg = e2b_connect_message(r, stream, why, sizeof(why));
        if (msg == NULL)
                return e2b_reply_connect_error(r, "invalid_argument", "%s", why);
        if (stream)
                return http_e2b_watch_dir(r, sandbox_id, msg);
        if (strcmp(method, "CreateWatcher") == 0 || strcmp(method, "GetWatcherEvents") == 0 ||
            strcmp(method, "RemoveWatcher") == 0)
                return http_e2b_watcher(r, sandbox_id, method, msg);
        const char *path = json_string_value(json_object_get(msg, "path"));
        bool needs_path = strcmp(method, "Stat") == 0 || strcmp(method, "ListDir") == 0 ||
                          strcmp(method, "MakeDir") == 0 || strcmp(method, "Remove") == 0;
        if (needs_path && (path == NULL || *path == '\0'))
                return e2b_reply_connect_error(r, "invalid_argument", "path must be a non-empty string");
        if (strcmp(method, "Stat") == 0)
                return reply_stat(r, sandbox_id, path);
        if (strcmp(method, "ListDir") == 0)
                return list_dir(r, sandbox_id, path, msg);
        if (strcmp(method, "MakeDir") == 0)
                return make_dir(r, sandbox_id, path);
        if (strcmp(method, "Move") == 0)
                return move(r, sandbox_id, msg);
        if (strcmp(method, "Remove") == 0)
                return remove_path(r, sandbox_id, path);
        return e2b_reply_connect_error(r, "unimplemented", "filesystem.Filesystem/%.64s is not implemented",
                                       method);
}
