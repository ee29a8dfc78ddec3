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
                      "max_bytes", (json_int_t)E2B_MAX_READ);
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "fs.read", params, &result, &error, &err) < 0)
                return files_error(r, error, err);
        if (json_is_true(json_object_get(result, "truncated")))
                return e2b_reply_rest_error(r, 413, "%s is larger than %u bytes", path, E2B_MAX_READ);
        const char *content = json_string_value(json_object_get(result, "content"));
        size_t len = 0;
        void *bytes = content ? base64_decode(content, strlen(content), &len) : NULL;
        if (bytes == NULL)
                return e2b_reply_rest_error(r, 500, "nsboxd's content of %s is not base64", path);
        return http_reply_bytes(r, MHD_HTTP_OK, "application/octet-stream", bytes, len);
}

/* The next part of a multipart/form-data body from *at: its bytes and the
 * filename its Content-Disposition gives (copied into name, "" without);
 * 0 at the closing boundary, 1 for a part, -EINVAL for a broken body. */
static int multipart_next(const char *boundary, const char **at, const char *end, const char **data,
                          size_t *len, char *name, size_t name_size)
{
        size_t blen = strlen(boundary); /* "\r\n--B" */
        const char *p = *at;
        /* the first boundary has no CRLF before it */
        if ((size_t)(end - p) >= blen - 2 && memcmp(p, boundary + 2, blen - 2) == 0)
                p += blen - 2;
        else if ((size_t)(end - p) >= blen && memcmp(p, boundary, blen) == 0)
                p += blen;
        else
                return -EINVAL;
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
                return 0;
        const char *start = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (start == NULL)
                return -EINVAL;
        name[0] = '\0';
        const char *fn = memmem(p, (size_t)(start - p), "filename=\"", 10);
        if (fn != NULL) {
                fn += 10;
                const char *close = memchr(fn, '"', (size_t)(start - fn));
                if (close != NULL && (size_t)(close - fn) < name_size) {
                        memcpy(name, fn, (size_t)(close - fn));
                        name[close - fn] = '\0';
                }
        }
        start += 4;
        const char *stop = memmem(start, (size_t)(end - start), boundary, blen);
        if (stop == NULL)
                return -EINVAL;
        *data = start;
        *len = (size_t)(stop - start);
        *at = stop;
        return 1;
}

static enum MHD_Result upload_error(struct http_request *r, struct client *c, json_t *error,
                                    const nsbox_error_t *err)
{
        if (c != NULL)
                client_close(c);
        return files_error(r, error, err);
}

/* Write one file (its parents made); its WriteInfo appended to out. */
static int upload_one(struct http_request *r, struct client *c, const char *sandbox_id, const char *path,
                      const char *data, size_t len, json_t *out, json_t **error, nsbox_error_t **err)
{
        size_t b64_len = 0;
        _cleanup_free_ char *b64 = base64_encode(data ? data : "", len, &b64_len);
        if (b64 == NULL)
                return nsbox_error(err, ENOMEM, "write %s", path);
        _cleanup_json_ json_t *params = json_pack("{s:s, s:s, s:s, s:s}", "sandbox_id", sandbox_id, "path",
                                                  path, "content", b64, "encoding", "base64");
        _cleanup_json_ json_t *result = NULL;
        if (params == NULL)
                return nsbox_error(err, ENOMEM, "write %s", path);
        int ret = http_client_call(r, c, "fs.write", params, &result, error, err);
        if (ret < 0)
                return ret;
        const char *slash = strrchr(path, '/');
        json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "path", path, "name",
                                             slash ? slash + 1 : path, "type", "file"));
        return 0;
}

/* POST /files: an octet-stream body is the file at ?path; a multipart one
 * holds one file per part, each at ?path (one part) or its filename. */
static enum MHD_Result upload(struct http_request *r, const char *sandbox_id, const char *path)
{
        const char *type =
            MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        const char *encoding =
            MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
        if (encoding != NULL && strcasecmp(encoding, "identity") != 0)
                return e2b_reply_rest_error(
                    r, 415, "nsbox takes uploads without Content-Encoding (not %.32s)", encoding);
        bool multipart = type != NULL && strncasecmp(type, "multipart/form-data", 19) == 0;
        if (!multipart && path == NULL)
                return e2b_reply_rest_error(r, 400, "path is required");
        struct client *c = NULL;
        _cleanup_json_ json_t *error = NULL, *out = json_array();
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_nsboxd_connect(r, &c, &error, &err) < 0)
                return files_error(r, error, err);
        if (!multipart) {
                if (upload_one(r, c, sandbox_id, path, r->body, r->body_len, out, &error, &err) < 0)
                        return upload_error(r, c, error, err);
                client_close(c);
                return http_reply_json(r, MHD_HTTP_OK, json_incref(out));
        }
        const char *b = strcasestr(type, "boundary=");
        char boundary[128];
        size_t blen = b ? strcspn(b + 9, "; \"") : 0;
        if (b != NULL && b[9] == '"') {
                b++;
                blen = strcspn(b + 9, "\"");
        }
        if (blen == 0 || blen > 70) {
                client_close(c);
                return e2b_reply_rest_error(r, 400,
                                            "a multipart body wants a boundary of 1 to 70 characters");
        }
        snprintf(boundary, sizeof(boundary), "\r\n--%.*s", (int)blen, b + 9);
        const char *at = r->body ? r->body : "", *end = at + r->body_len;
        char name[4097];
        for (;;) {
                const char *data;
                size_t len;
                int got = multipart_next(boundary, &at, end, &data, &len, name, sizeof(name));
                if (got < 0) {
                        client_close(c);
                        return e2b_reply_rest_error(r, 400, "the multipart body is broken");
                }
                if (got == 0)
                        break;
                const char *to = path ? path : name;
                if (*to == '\0') {
                        client_close(c);
                        return e2b_reply_rest_error(r, 400, "a part without a filename, and no path");
                }
                if (upload_one(r, c, sandbox_id, to, data, len, out, &error, &err) < 0)
                        return upload_error(r, c, error, err);
        }
        client_close(c);
        if (json_array_size(out) == 0)
                return e2b_reply_rest_error(r, 400, "the multipart body holds no file");
        return http_reply_json(r, MHD_HTTP_OK, json_incref(out));
}

enum MHD_Result http_e2b_files(struct http_request *r, const char *sandbox_id)
{
        const char *path = query(r, "path");
        if (path != NULL && *path == '\0')
                path = NULL;
        if (strcmp(r->method, "GET") == 0 && path == NULL)
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

static enum MHD_Result list_dir(struct http_request *r, const char *sandbox_id, const char *path, json_t *msg)
{
        json_t *d = json_object_get(msg, "depth");
        json_int_t depth = json_is_integer(d) ? json_integer_value(d) : 1;
        if (depth < 0 || depth > E2B_LIST_MAX_DEPTH)
                return e2b_reply_connect_error(r, "invalid_argument", "depth must be 0 to %d",
                                               E2B_LIST_MAX_DEPTH);
        _cleanup_json_ json_t *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *entries = json_array(), *target = json_pack("{s:s}", "sandbox_id", sandbox_id);
        if (e2b_list_tree(r, "fs.list", target, path, (unsigned)depth, e2b_entry_info, entries, &error,
                          &err) < 0)
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
