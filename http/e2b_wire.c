/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's wire (e2b_wire.h): the Connect protocol's JSON codec and errors,
 * the headers that name a sandbox and a user, EntryInfo. */
#include "e2b_wire.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client.h"
#include "cleanup.h"
#include "json_cleanup.h"
#include "jsonrpc.h"
#include "nsboxd.h"
#include "reply.h"
#include "textenc.h"

unsigned e2b_port_number(const char *text, size_t len)
{
        unsigned long port = 0;
        for (size_t i = 0; i < len && port <= 65535; i++)
                port = text[i] >= '0' && text[i] <= '9' ? port * 10 + (unsigned)(text[i] - '0') : 65536;
        return len > 0 && port <= 65535 ? (unsigned)port : 0;
}

const char *e2b_sandbox_id(struct MHD_Connection *connection)
{
        return MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "E2b-Sandbox-Id");
}

static bool path_under(const char *url, const char *prefix)
{
        size_t n = strlen(prefix);
        return strncmp(url, prefix, n) == 0 && (url[n] == '\0' || url[n] == '/');
}

bool e2b_request(struct MHD_Connection *connection, const char *url)
{
        return e2b_sandbox_id(connection) != NULL ||
               MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "X-API-KEY") != NULL ||
               path_under(url, "/sandboxes") || path_under(url, "/v2/sandboxes") ||
               path_under(url, "/snapshots") || path_under(url, "/templates") ||
               path_under(url, "/v2/templates") || path_under(url, "/teams") || path_under(url, "/volumes") ||
               path_under(url, "/volumecontent");
}

int e2b_volume_content_id(const char *url, char id[E2B_MAX_VOLUME_ID + 1])
{
        static const char prefix[] = "/volumecontent/";
        if (strncmp(url, prefix, sizeof(prefix) - 1) != 0)
                return -EINVAL;
        const char *start = url + sizeof(prefix) - 1, *end = strchr(start, '/');
        size_t n = end ? (size_t)(end - start) : strlen(start);
        if (n == 0 || n > E2B_MAX_VOLUME_ID)
                return -EINVAL;
        memcpy(id, start, n);
        id[n] = '\0';
        return 0;
}

const char *e2b_user(struct MHD_Connection *connection)
{
        const char *auth =
            MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (auth == NULL || strncasecmp(auth, "Basic ", 6) != 0)
                return "sandbox";
        const char *b64 = auth + 6;
        size_t n = strlen(b64);
        if (n > 256)
                return "sandbox";
        size_t plain_len = 0;
        _cleanup_free_ char *plain = base64_decode(b64, n, &plain_len);
        if (plain == NULL)
                return "sandbox";
        return plain_len >= 5 && memcmp(plain, "root:", 5) == 0 ? "root" : "sandbox";
}

json_t *e2b_connect_message(const struct http_request *r, bool stream, char *why, size_t why_len)
{
        const unsigned char *p = (const unsigned char *)r->body;
        size_t len = r->body_len;
        if (stream) {
                if (len < 5) {
                        snprintf(why, why_len, "a stream's request is one envelope: 5 bytes and a message");
                        return NULL;
                }
                uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
                if (p[0] & E2B_FLAG_COMPRESSED) {
                        snprintf(why, why_len, "compressed messages are not accepted");
                        return NULL;
                }
                if (p[0] != 0 || n > E2B_MAX_MESSAGE || (size_t)n != len - 5) {
                        snprintf(why, why_len, "the envelope says %u bytes of flags %u; %zu came", n, p[0],
                                 len - 5);
                        return NULL;
                }
                p += 5;
                len = n;
        }
        if (len == 0)
                return json_object();
        json_error_t jerr;
        json_t *msg = json_loadb((const char *)p, len, JSON_REJECT_DUPLICATES, &jerr);
        if (msg == NULL) {
                snprintf(why, why_len, "the message is not JSON: %s", jerr.text);
                return NULL;
        }
        if (!json_is_object(msg)) {
                json_decref(msg);
                snprintf(why, why_len, "the message must be a JSON object");
                return NULL;
        }
        return msg;
}

ssize_t e2b_body_read(struct e2b_body *b, char *out, size_t max, bool (*more)(void *data), void *data)
{
        for (;;) {
                if (b->off < b->len) {
                        size_t n = b->len - b->off < max ? b->len - b->off : max;
                        memcpy(out, b->buf + b->off, n);
                        b->off += n;
                        return (ssize_t)n;
                }
                b->len = b->off = 0;
                if (b->done)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                if (!more(data))
                        return MHD_CONTENT_READER_END_WITH_ERROR;
        }
}

int e2b_envelope_append(char **buf, size_t *len, size_t *cap, unsigned flags, json_t *message)
{
        _cleanup_free_ char *text = message ? json_dumps(message, JSON_COMPACT) : strdup("{}");
        if (text == NULL)
                return -ENOMEM;
        size_t n = strlen(text);
        unsigned char head[5] = { (unsigned char)flags, (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                                  (unsigned char)(n >> 8), (unsigned char)n };
        if (*len + 5 + n > *cap) {
                size_t want = *cap ? *cap : 4096;
                while (want < *len + 5 + n)
                        want *= 2;
                char *more = realloc(*buf, want);
                if (more == NULL)
                        return -ENOMEM;
                *buf = more;
                *cap = want;
        }
        memcpy(*buf + *len, head, 5);
        memcpy(*buf + *len + 5, text, n);
        *len += 5 + n;
        return 0;
}

const char *e2b_connect_code(json_t *error)
{
        if (error == NULL)
                return "unavailable";
        const char *kind;
        http_status_of_rpc_error(error, &kind);
        static const char *const map[][2] = {
                { "invalid_params", "invalid_argument" },
                { "not_found", "not_found" },
                { "gone", "not_found" },
                { "exists", "already_exists" },
                { "permission_denied", "permission_denied" },
                { "limit_reached", "resource_exhausted" },
                { "busy", "resource_exhausted" },
                { "unavailable", "unavailable" },
                { "internal", "internal" },
        };
        for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
                if (strcmp(kind, map[i][0]) == 0)
                        return map[i][1];
        return "unknown";
}

unsigned e2b_connect_status(const char *code)
{
        static const struct {
                const char *code;
                unsigned status;
        } map[] = {
                { "invalid_argument", 400 },   { "failed_precondition", 400 },
                { "out_of_range", 400 },       { "unauthenticated", 401 },
                { "permission_denied", 403 },  { "not_found", 404 },
                { "already_exists", 409 },     { "aborted", 409 },
                { "resource_exhausted", 429 }, { "canceled", 499 },
                { "unimplemented", 501 },      { "unavailable", 503 },
                { "deadline_exceeded", 504 },
        };
        for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
                if (strcmp(code, map[i].code) == 0)
                        return map[i].status;
        return 500;
}

json_t *e2b_connect_error_json(const char *code, const char *message)
{
        return json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", message ? message : code);
}

static const char *rpc_message(json_t *error, const nsbox_error_t *err)
{
        if (error == NULL)
                return err && err->message ? err->message : "nsboxd is unreachable";
        const char *m = json_string_value(json_object_get(error, "message"));
        return m ? m : "error";
}

enum MHD_Result e2b_reply_connect_error(struct http_request *r, const char *code, const char *fmt, ...)
{
        char message[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        return http_reply_json(r, e2b_connect_status(code),
                               json_pack("{s:s, s:s}", "code", code, "message", message));
}

enum MHD_Result e2b_reply_connect_rpc_error(struct http_request *r, json_t *error, const nsbox_error_t *err)
{
        return e2b_reply_connect_error(r, e2b_connect_code(error), "%s", rpc_message(error, err));
}

enum MHD_Result e2b_reply_rest_error(struct http_request *r, unsigned status, const char *fmt, ...)
{
        char message[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        return http_reply_json(r, status,
                               json_pack("{s:I, s:s}", "code", (json_int_t)status, "message", message));
}

enum MHD_Result e2b_reply_rest_rpc_error(struct http_request *r, json_t *error, const nsbox_error_t *err)
{
        unsigned status = error ? http_status_of_rpc_error(error, NULL) : MHD_HTTP_SERVICE_UNAVAILABLE;
        /* a sandbox removed lately is nsbox's 410; E2B's SDKs know it as not found */
        if (status == MHD_HTTP_GONE)
                status = MHD_HTTP_NOT_FOUND;
        return e2b_reply_rest_error(r, status, "%s", rpc_message(error, err));
}

static void permissions_text(unsigned mode, bool dir, bool link, char out[11])
{
        static const char bits[] = "rwxrwxrwx";
        out[0] = link ? 'L' : dir ? 'd' : '-';
        for (int i = 0; i < 9; i++)
                out[1 + i] = (mode & (0400u >> i)) ? bits[i] : '-';
        out[10] = '\0';
}

char *e2b_entry_path(json_t *stat, const char *dir)
{
        const char *name = json_string_value(json_object_get(stat, "name"));
        const char *path = json_string_value(json_object_get(stat, "path"));
        if (path != NULL)
                return strdup(path);
        char *joined = NULL;
        if (dir == NULL || name == NULL ||
            asprintf(&joined, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", name) < 0)
                return NULL;
        return joined;
}

json_t *e2b_entry_info(json_t *stat, const char *dir)
{
        const char *name = json_string_value(json_object_get(stat, "name"));
        const char *type = json_string_value(json_object_get(stat, "type"));
        _cleanup_free_ char *joined = e2b_entry_path(stat, dir);
        const char *path = joined;
        if (name == NULL && path != NULL) {
                const char *slash = strrchr(path, '/');
                name = slash && slash[1] ? slash + 1 : path;
        }
        bool is_dir = type && strcmp(type, "dir") == 0, is_link = type && strcmp(type, "symlink") == 0;
        unsigned mode = (unsigned)json_integer_value(json_object_get(stat, "mode")) & 07777;
        char perms[11];
        permissions_text(mode, is_dir, is_link, perms);
        char size[32];
        snprintf(size, sizeof(size), "%lld", (long long)json_integer_value(json_object_get(stat, "size")));
        json_int_t uid = json_integer_value(json_object_get(stat, "uid"));
        const char *owner = json_object_get(stat, "uid") == NULL ? "user" : uid == 0 ? "root" : "user";
        json_t *mtime = json_object_get(stat, "mtime");
        json_t *entry =
            json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:s}", "name", name ? name : "", "type",
                      is_dir    ? "FILE_TYPE_DIRECTORY"
                      : is_link ? "FILE_TYPE_SYMLINK"
                                : "FILE_TYPE_FILE",
                      "path", path ? path : "", "size", size, "mode", (json_int_t)mode, "permissions", perms,
                      "owner", owner, "group", owner);
        if (entry != NULL && json_is_string(mtime))
                json_object_set(entry, "modifiedTime", mtime);
        if (entry != NULL && json_is_string(json_object_get(stat, "target")))
                json_object_set(entry, "symlinkTarget", json_object_get(stat, "target"));
        return entry;
}

static int list_into(struct client *c, const char *method, json_t *target, const char *dir, unsigned depth,
                     e2b_entry_fn entry, json_t *out, json_t **error, nsbox_error_t **err)
{
        _cleanup_json_ json_t *params = json_deep_copy(target), *result = NULL;
        if (params == NULL || json_object_set_new(params, "path", json_string(dir)) < 0)
                return nsbox_error(err, ENOMEM, "list %s", dir);
        int ret = client_call(c, method, params, NULL, NULL, &result, error, err);
        if (ret < 0)
                return ret;
        const char *base = json_string_value(json_object_get(result, "path"));
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(result, "entries"), i, e)
        {
                if (json_array_size(out) >= E2B_LIST_MAX_ENTRIES)
                        return 0;
                json_t *info = entry(e, base ? base : dir);
                if (info == NULL)
                        return nsbox_error(err, ENOMEM, "list %s", dir);
                json_array_append_new(out, info);
                const char *type = json_string_value(json_object_get(e, "type"));
                if (depth > 1 && type != NULL && strcmp(type, "dir") == 0) {
                        const char *sub = json_string_value(json_object_get(info, "path"));
                        ret = list_into(c, method, target, sub, depth - 1, entry, out, error, err);
                        if (ret < 0)
                                return ret;
                }
        }
        return 0;
}

int e2b_list_tree(struct http_request *r, const char *method, json_t *target, const char *dir, unsigned depth,
                  e2b_entry_fn entry, json_t *out, json_t **error, nsbox_error_t **err)
{
        struct client *c = NULL;
        int ret = http_nsboxd_connect(r, &c, error, err);
        if (ret < 0)
                return ret;
        ret = list_into(c, method, target, dir, depth == 0 ? 1 : depth, entry, out, error, err);
        client_close(c);
        return ret;
}
