/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's volume content API (e2b_volumes.h) on nsboxd's volume.fs.*: the
 * files of a volume of the caller's, its path the volume's (from its root).
 * Errors are the API's {code, message}, code a string (nsbox's kind). */
#include "e2b_volumes.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "sandbox_user.h"
#include "e2b_wire.h"
#include "json_cleanup.h"
#include "nsboxd.h"
#include "reply.h"
#include "textenc.h"

/* nsboxd keeps a volume's files the sandbox user's, as every sandbox sees them. */

static const char *query(struct http_request *r, const char *key)
{
        return MHD_lookup_connection_value(r->connection, MHD_GET_ARGUMENT_KIND, key);
}

static enum MHD_Result volume_error(struct http_request *r, unsigned status, const char *code,
                                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static enum MHD_Result volume_error(struct http_request *r, unsigned status, const char *code,
                                    const char *fmt, ...)
{
        char message[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        return http_reply_json(r, status, json_pack("{s:s, s:s}", "code", code, "message", message));
}

/* An nsboxd error as the API's: an existing path is a conflict, a full
 * volume is out of storage (not a rate to retry), the rest by their kind. */
static enum MHD_Result rpc_failure(struct http_request *r, json_t *error, const nsbox_error_t *err)
{
        if (error == NULL)
                return volume_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable", "nsboxd: %s",
                                    err && err->message ? err->message : "unreachable");
        const char *kind;
        unsigned status = http_status_of_rpc_error(error, &kind);
        const char *errnum = json_string_value(json_object_get(json_object_get(error, "data"), "errno"));
        const char *message = json_string_value(json_object_get(error, "message"));
        if (errnum != NULL && strcmp(errnum, "EEXIST") == 0)
                status = MHD_HTTP_CONFLICT;
        else if (errnum != NULL && (strcmp(errnum, "ENOSPC") == 0 || strcmp(errnum, "EDQUOT") == 0))
                status = MHD_HTTP_INSUFFICIENT_STORAGE;
        return volume_error(r, status, kind, "%s", message ? message : "error");
}

static int call(struct http_request *r, const char *method, const char *volume, const char *path,
                json_t *params, json_t **result, json_t **error, nsbox_error_t **err)
{
        json_object_set_new(params, "volume", json_string(volume));
        json_object_set_new(params, "path", json_string(path));
        return http_call(r, method, params, result, error, err);
}

/* VolumeEntryStat of a volume.fs.stat result or a volume.fs.list entry in dir. */
static json_t *entry_stat(json_t *stat, const char *dir)
{
        _cleanup_free_ char *path = e2b_entry_path(stat, dir);
        const char *type = json_string_value(json_object_get(stat, "type"));
        const char *name = json_string_value(json_object_get(stat, "name"));
        const char *e2b_type = type == NULL                   ? "unknown"
                               : strcmp(type, "file") == 0    ? "file"
                               : strcmp(type, "dir") == 0     ? "directory"
                               : strcmp(type, "symlink") == 0 ? "symlink"
                                                              : "unknown";
        json_t *entry =
            json_pack("{s:s, s:s, s:s, s:O, s:O, s:O, s:O, s:O, s:O, s:O}", "name", name ? name : "", "type",
                      e2b_type, "path", path ? path : "", "size", json_object_get(stat, "size"), "mode",
                      json_object_get(stat, "mode"), "uid", json_object_get(stat, "uid"), "gid",
                      json_object_get(stat, "gid"), "atime", json_object_get(stat, "atime"), "mtime",
                      json_object_get(stat, "mtime"), "ctime", json_object_get(stat, "ctime"));
        if (entry != NULL && json_is_string(json_object_get(stat, "target")))
                json_object_set(entry, "target", json_object_get(stat, "target"));
        return entry;
}

static enum MHD_Result reply_stat(struct http_request *r, const char *volume, const char *path,
                                  unsigned status)
{
        _cleanup_json_ json_t *params = json_object(), *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (call(r, "volume.fs.stat", volume, path, params, &result, &error, &err) < 0)
                return rpc_failure(r, error, err);
        json_t *entry = entry_stat(result, NULL);
        if (entry == NULL)
                return volume_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "out of memory");
        return http_reply_json(r, status, entry);
}

/* A query's or body's unsigned number (uid, gid, mode) at most max; *set
 * says whether it was given. false: not such a number. */
static bool number_of(const char *text, json_t *value, unsigned long max, unsigned long *out, bool *set)
{
        *set = false;
        if (value != NULL && !json_is_null(value)) {
                if (!json_is_integer(value) || json_integer_value(value) < 0 ||
                    (unsigned long)json_integer_value(value) > max)
                        return false;
                *out = (unsigned long)json_integer_value(value);
                *set = true;
                return true;
        }
        if (text == NULL)
                return true;
        char *end;
        errno = 0;
        unsigned long n = strtoul(text, &end, 10);
        if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0 || n > max)
                return false;
        *out = n;
        *set = true;
        return true;
}

/* The uid, gid and mode a request asks for (query or body); false with the
 * reply made in *ret when one is bad or names an owner nsbox does not keep. */
static bool metadata_of(struct http_request *r, json_t *body, unsigned long max_mode, unsigned long *mode,
                        bool *mode_set, enum MHD_Result *ret)
{
        static const char *const ids[] = { "uid", "gid" };
        for (size_t i = 0; i < 2; i++) {
                unsigned long id;
                bool set;
                if (!number_of(query(r, ids[i]), json_object_get(body, ids[i]), UINT32_MAX, &id, &set)) {
                        *ret = volume_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params", "%s must be a uid",
                                            ids[i]);
                        return false;
                }
                if (set && id != NSBOX_SANDBOX_USER) {
                        *ret = volume_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                            "nsbox keeps a volume's files the sandbox user's (%s %d, as "
                                            "every sandbox that mounts it sees them)",
                                            ids[i], NSBOX_SANDBOX_USER);
                        return false;
                }
        }
        if (!number_of(query(r, "mode"), json_object_get(body, "mode"), max_mode, mode, mode_set)) {
                *ret = volume_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params", "mode must be 0 to 0%lo",
                                    max_mode);
                return false;
        }
        return true;
}

static enum MHD_Result chmod_then_stat(struct http_request *r, const char *volume, const char *path,
                                       unsigned long mode, bool mode_set, unsigned status)
{
        if (mode_set) {
                _cleanup_json_ json_t *params = json_pack("{s:I}", "mode", (json_int_t)mode), *result = NULL,
                                      *error = NULL;
                _cleanup_error_ nsbox_error_t *err = NULL;
                if (call(r, "volume.fs.chmod", volume, path, params, &result, &error, &err) < 0)
                        return rpc_failure(r, error, err);
        }
        return reply_stat(r, volume, path, status);
}

static enum MHD_Result list_dir(struct http_request *r, const char *volume, const char *path)
{
        const char *d = query(r, "depth");
        unsigned long depth = 1;
        bool set;
        if (!number_of(d, NULL, E2B_LIST_MAX_DEPTH, &depth, &set))
                return volume_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params", "depth must be 0 to %d",
                                    E2B_LIST_MAX_DEPTH);
        _cleanup_json_ json_t *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *entries = json_array(), *target = json_pack("{s:s}", "volume", volume);
        if (e2b_list_tree(r, "volume.fs.list", target, path, (unsigned)depth, entry_stat, entries, &error,
                          &err) < 0)
                return rpc_failure(r, error, err);
        return http_reply_json(r, MHD_HTTP_OK, json_incref(entries));
}

static enum MHD_Result make_dir(struct http_request *r, const char *volume, const char *path)
{
        enum MHD_Result ret;
        unsigned long mode = 0;
        bool mode_set;
        if (!metadata_of(r, NULL, 01777, &mode, &mode_set, &ret))
                return ret;
        const char *force = query(r, "force");
        _cleanup_json_ json_t *params = json_pack("{s:b}", "parents", force && strcmp(force, "true") == 0),
                              *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (call(r, "volume.fs.mkdir", volume, path, params, &result, &error, &err) < 0)
                return rpc_failure(r, error, err);
        return chmod_then_stat(r, volume, path, mode, mode_set, MHD_HTTP_CREATED);
}

static enum MHD_Result update_metadata(struct http_request *r, const char *volume, const char *path)
{
        enum MHD_Result ret;
        json_error_t jerr;
        _cleanup_json_ json_t *body =
            r->body_len ? json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &jerr) : json_object();
        if (!json_is_object(body))
                return volume_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                    "the body must be a JSON object {uid, gid, mode}");
        unsigned long mode = 0;
        bool mode_set;
        if (!metadata_of(r, body, 01777, &mode, &mode_set, &ret))
                return ret;
        return chmod_then_stat(r, volume, path, mode, mode_set, MHD_HTTP_OK);
}

static enum MHD_Result remove_path(struct http_request *r, const char *volume, const char *path)
{
        _cleanup_json_ json_t *params = json_pack("{s:b}", "recursive", 1), *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (call(r, "volume.fs.remove", volume, path, params, &result, &error, &err) < 0)
                return rpc_failure(r, error, err);
        return http_reply_bytes(r, MHD_HTTP_NO_CONTENT, "application/json", NULL, 0);
}

static enum MHD_Result download(struct http_request *r, const char *volume, const char *path)
{
        _cleanup_json_ json_t *params = json_pack("{s:s, s:I}", "encoding", "base64", "max_bytes",
                                                  (json_int_t)E2B_MAX_READ),
                              *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (call(r, "volume.fs.read", volume, path, params, &result, &error, &err) < 0)
                return rpc_failure(r, error, err);
        if (json_is_true(json_object_get(result, "truncated")))
                return volume_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "limit_reached",
                                    "%s is larger than %u bytes", path, E2B_MAX_READ);
        json_t *content = json_object_get(result, "content");
        size_t len = 0;
        void *bytes = json_is_string(content)
                          ? base64_decode(json_string_value(content), json_string_length(content), &len)
                          : NULL;
        if (bytes == NULL)
                return volume_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                                    "nsboxd's content of %s is not base64", path);
        return http_reply_bytes(r, MHD_HTTP_OK, "application/octet-stream", bytes, len);
}

/* The body is the file (at most nsbox-http's body bound); parents are made. */
static enum MHD_Result upload(struct http_request *r, const char *volume, const char *path)
{
        enum MHD_Result ret;
        unsigned long mode = 0;
        bool mode_set;
        if (!metadata_of(r, NULL, 07777, &mode, &mode_set, &ret))
                return ret;
        size_t len = 0;
        _cleanup_free_ char *content = base64_encode(r->body ? r->body : "", r->body_len, &len);
        if (content == NULL)
                return volume_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "out of memory");
        _cleanup_json_ json_t *params =
                                  json_pack("{s:s%, s:s}", "content", content, len, "encoding", "base64"),
                              *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (params != NULL && mode_set)
                json_object_set_new(params, "mode", json_integer((json_int_t)mode));
        if (params == NULL)
                return volume_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "out of memory");
        if (call(r, "volume.fs.write", volume, path, params, &result, &error, &err) < 0)
                return rpc_failure(r, error, err);
        return reply_stat(r, volume, path, MHD_HTTP_CREATED);
}

enum MHD_Result http_e2b_volume_content(struct http_request *r, const char *volume)
{
        const char *what = r->url + strlen("/volumecontent/") + strlen(volume);
        const char *m = r->method, *path = query(r, "path");
        bool get = strcmp(m, "GET") == 0;
        bool dir = strcmp(what, "/dir") == 0, entry = strcmp(what, "/path") == 0,
             file = strcmp(what, "/file") == 0;
        if (!dir && !entry && !file)
                return volume_error(r, MHD_HTTP_NOT_FOUND, "not_found",
                                    "%s %.200s is not a volume content path", m, r->url);
        if (path == NULL || path[0] == '\0')
                return volume_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                    "the path query parameter is required");
        if (dir && get)
                return list_dir(r, volume, path);
        if (dir && strcmp(m, "POST") == 0)
                return make_dir(r, volume, path);
        if (entry && get)
                return reply_stat(r, volume, path, MHD_HTTP_OK);
        if (entry && strcmp(m, "PATCH") == 0)
                return update_metadata(r, volume, path);
        if (entry && strcmp(m, "DELETE") == 0)
                return remove_path(r, volume, path);
        if (file && get)
                return download(r, volume, path);
        if (file && strcmp(m, "PUT") == 0)
                return upload(r, volume, path);
        return volume_error(r, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_params", "%s is not a method of %s", m,
                            what);
}
