/* SPDX-License-Identifier: Apache-2.0 */
/* Requests of nsbox-http: authentication, bodies (bounded while they
 * arrive), routing, replies, and the connection to nsboxd each request
 * makes as its owner. */
#include "http.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>

#include "cleanup.h"
#include "json_cleanup.h"
#include "jsonrpc.h"

struct http_config http_config;

/* A client that goes on sending past the limit after its 413 is dropped
 * once this much more has been thrown away. */
#define HTTP_MAX_DISCARD (64u << 20)

/* Every reply goes out here: its headers by status, then queued. */
static enum MHD_Result queue_reply(struct http_request *r, unsigned status, struct MHD_Response *resp,
                                   const char *content_type)
{
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
        if (status == MHD_HTTP_UNAUTHORIZED)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"nsbox\"");
        if (status == MHD_HTTP_TOO_MANY_REQUESTS || status == MHD_HTTP_SERVICE_UNAVAILABLE)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
        enum MHD_Result ret = MHD_queue_response(r->connection, status, resp);
        MHD_destroy_response(resp);
        if (ret == MHD_YES)
                r->answered = true;
        return ret;
}

enum MHD_Result http_reply_bytes(struct http_request *r, unsigned status, const char *content_type,
                                 void *data, size_t len)
{
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
        if (resp == NULL) {
                free(data);
                return MHD_NO;
        }
        return queue_reply(r, status, resp, content_type);
}

enum MHD_Result http_reply_stream(struct http_request *r, const char *content_type,
                                  MHD_ContentReaderCallback read, void *data,
                                  MHD_ContentReaderFreeCallback done)
{
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 65536, read, data, done);
        if (resp == NULL) {
                done(data);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        return queue_reply(r, MHD_HTTP_OK, resp, content_type);
}

enum MHD_Result http_reply_json(struct http_request *r, unsigned status, json_t *body)
{
        _cleanup_json_ json_t *owned = body;
        size_t len = 0;
        char *text = owned ? jsonrpc_serialize(owned, &len) : NULL;
        if (text == NULL) {
                static const char oom[] =
                    "{\"error\":{\"kind\":\"internal\",\"message\":\"cannot encode the reply\"}}\n";
                text = strdup(oom);
                len = text ? strlen(text) : 0;
                status = MHD_HTTP_INTERNAL_SERVER_ERROR;
                if (text == NULL)
                        return MHD_NO;
        }
        return http_reply_bytes(r, status, "application/json", text, len);
}

enum MHD_Result http_reply_error(struct http_request *r, unsigned status, const char *kind, const char *fmt,
                                 ...)
{
        char message[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        return http_reply_json(r, status,
                               json_pack("{s:{s:s, s:s}}", "error", "kind", kind, "message", message));
}

unsigned http_status_of_rpc_error(json_t *error, const char **kind_out)
{
        const char *kind = json_string_value(json_object_get(json_object_get(error, "data"), "kind"));
        json_int_t code = json_integer_value(json_object_get(error, "code"));
        unsigned status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        if (kind == NULL) {
                /* protocol errors carry no kind */
                kind = code == JSONRPC_METHOD_NOT_FOUND ? "not_found"
                       : code == JSONRPC_INTERNAL_ERROR ? "internal"
                                                        : "invalid_params";
        }
        if (strcmp(kind, "invalid_params") == 0)
                status = MHD_HTTP_BAD_REQUEST;
        else if (strcmp(kind, "not_found") == 0)
                status = MHD_HTTP_NOT_FOUND;
        else if (strcmp(kind, "limit_reached") == 0 || strcmp(kind, "busy") == 0)
                status = MHD_HTTP_TOO_MANY_REQUESTS;
        else if (strcmp(kind, "unavailable") == 0)
                status = MHD_HTTP_SERVICE_UNAVAILABLE;
        else if (strcmp(kind, "permission_denied") == 0)
                status = MHD_HTTP_FORBIDDEN;
        if (kind_out)
                *kind_out = kind;
        return status;
}

enum MHD_Result http_reply_rpc_error(struct http_request *r, json_t *error, const nsbox_error_t *err)
{
        if (error == NULL)
                return http_reply_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable", "nsboxd: %s",
                                        err && err->message ? err->message : "unreachable");
        const char *kind;
        unsigned status = http_status_of_rpc_error(error, &kind);
        json_t *message = json_object_get(error, "message");
        return http_reply_json(r, status,
                               json_pack("{s:{s:s, s:s}}", "error", "kind", kind, "message",
                                         json_is_string(message) ? json_string_value(message) : "error"));
}

int http_nsboxd_connect(const struct http_request *r, struct client **out, json_t **error,
                        nsbox_error_t **err)
{
        struct client *c = NULL;
        *error = NULL;
        int ret = client_connect(http_config.socket_path, &c, err);
        if (ret < 0)
                return ret;
        if (http_config.act_as) {
                /* Its refusal (limit_reached past the owner's connections) is
                 * the request's answer, with that error's status. */
                _cleanup_json_ json_t *params = json_pack("{s:I}", "uid", (json_int_t)r->uid);
                _cleanup_json_ json_t *result = NULL;
                ret = client_call(c, "auth.act_as", params, NULL, NULL, &result, error, err);
                if (ret < 0) {
                        client_close(c);
                        return ret;
                }
        }
        *out = c;
        return 0;
}

int http_call(const struct http_request *r, const char *method, json_t *params, json_t **result,
              json_t **error, nsbox_error_t **err)
{
        struct client *c = NULL;
        int ret = http_nsboxd_connect(r, &c, error, err);
        if (ret < 0)
                return ret;
        ret = client_call(c, method, params, NULL, NULL, result, error, err);
        client_close(c);
        return ret;
}

int http_buffer_append(char **data, size_t *len, size_t *cap, const void *more, size_t n)
{
        if (*len + n > *cap) {
                size_t grown_cap = *cap ? *cap : 16384;
                while (grown_cap < *len + n)
                        grown_cap *= 2;
                /* a body is at most this: no room beyond it */
                if (grown_cap > HTTP_MAX_BODY && *len + n <= HTTP_MAX_BODY)
                        grown_cap = HTTP_MAX_BODY;
                char *grown = realloc(*data, grown_cap);
                if (grown == NULL)
                        return -ENOMEM;
                *data = grown;
                *cap = grown_cap;
        }
        memcpy(*data + *len, more, n);
        *len += n;
        return 0;
}

int http_sandbox_write(struct client *c, const char *sandbox_id, const char *path, const char *base64,
                       json_t **error, nsbox_error_t **err)
{
        *error = NULL;
        const char *slash = strrchr(path, '/');
        if (slash != NULL && slash != path) {
                _cleanup_free_ char *dir = strndup(path, (size_t)(slash - path));
                _cleanup_json_ json_t *p =
                    json_pack("{s:s, s:s, s:b}", "sandbox_id", sandbox_id, "path", dir, "parents", 1);
                _cleanup_json_ json_t *res = NULL;
                if (dir == NULL || p == NULL)
                        return nsbox_error(err, ENOMEM, "write %s", path);
                int r = client_call(c, "fs.mkdir", p, NULL, NULL, &res, error, err);
                if (r < 0)
                        return r;
        }
        _cleanup_json_ json_t *p = json_pack("{s:s, s:s, s:s, s:s}", "sandbox_id", sandbox_id, "path", path,
                                             "content", base64, "encoding", "base64");
        _cleanup_json_ json_t *res = NULL;
        if (p == NULL)
                return nsbox_error(err, ENOMEM, "write %s", path);
        return client_call(c, "fs.write", p, NULL, NULL, &res, error, err);
}

json_t *http_body_object(struct http_request *r, enum MHD_Result *ret)
{
        json_error_t jerr;
        json_t *body = r->body_len ? json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
        if (body == NULL) {
                *ret = http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params", "the body is not JSON: %s",
                                        r->body_len ? jerr.text : "empty");
                return NULL;
        }
        if (!json_is_object(body)) {
                json_decref(body);
                *ret = http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                        "the body must be a JSON object");
                return NULL;
        }
        return body;
}

/* "Bearer TOKEN": the token's uid, or 0. */
static uid_t authenticate(struct MHD_Connection *connection)
{
        const char *auth =
            MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0)
                return 0;
        const char *token = auth + 7;
        while (*token == ' ')
                token++;
        size_t len = strlen(token);
        while (len > 0 && token[len - 1] == ' ')
                len--;
        return http_tokens_lookup(token, len);
}

/* Host: 127.x.y.z, localhost or [::1], with or without a port. */
static bool loopback_host(const char *host)
{
        char name[256];
        size_t n = strlen(host);
        if (n == 0 || n >= sizeof(name))
                return false;
        memcpy(name, host, n + 1);
        if (name[0] == '[') {
                char *close = strchr(name, ']');
                if (close == NULL || (close[1] != '\0' && close[1] != ':'))
                        return false;
                *close = '\0';
                return strcmp(name + 1, "::1") == 0;
        }
        char *colon = strchr(name, ':');
        if (colon != NULL)
                *colon = '\0';
        struct in_addr a;
        if (strcasecmp(name, "localhost") == 0)
                return true;
        return inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* Without tokens, reaching the loopback port is the only credential, and a
 * browser reaches it for any web page: a cross-site "simple" POST (no
 * preflight) carries an Origin, a DNS-rebound name a Host of that name.
 * Programs (curl, SDKs) send neither. */
static bool from_this_host(struct MHD_Connection *connection)
{
        const char *host = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        const char *origin = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Origin");
        return origin == NULL && (host == NULL || loopback_host(host));
}

static bool path_is(const char *url, const char *prefix, const char **rest)
{
        size_t n = strlen(prefix);
        if (strncmp(url, prefix, n) != 0)
                return false;
        if (rest != NULL) {
                *rest = url + n;
                return true;
        }
        return url[n] == '\0';
}

static bool is_upload(const struct http_request *r)
{
        return strcmp(r->method, "POST") == 0 && strcmp(r->url, "/upload") == 0;
}

/* Every request's whole body is here: answer it. */
static enum MHD_Result route(struct http_request *r)
{
        const char *rest;
        bool get = strcmp(r->method, "GET") == 0, post = strcmp(r->method, "POST") == 0;
        enum MHD_Result ret;
        if (post && path_is(r->url, "/v1/rpc/", &rest))
                return http_rpc_handle(r, rest);
        if (post && path_is(r->url, "/v1/rpc", NULL))
                return http_rpc_handle(r, NULL);
        if (post && path_is(r->url, "/execute", NULL)) {
                _cleanup_json_ json_t *body = http_body_object(r, &ret);
                if (body == NULL)
                        return ret;
                /* The seed's contract sends code; agent-sandbox's sends command. */
                if (json_object_get(body, "code") != NULL)
                        return http_seed_execute(r, body);
                if (json_object_get(body, "command") != NULL)
                        return http_agent_execute(r, body);
                return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                        "give code (a Python program) or command (a shell command)");
        }
        if (post && path_is(r->url, "/execute_command_stateful", NULL)) {
                _cleanup_json_ json_t *body = http_body_object(r, &ret);
                return body ? http_agent_execute_stateful(r, body) : ret;
        }
        if (get && (path_is(r->url, "/health", NULL) || path_is(r->url, "/v1/health", NULL) ||
                    path_is(r->url, "/", NULL)))
                return http_seed_health(r);
        if (is_upload(r))
                return http_agent_upload_finish(r);
        if (get && path_is(r->url, "/download/", &rest))
                return http_agent_files(r, "download", rest);
        if (get && path_is(r->url, "/list/", &rest))
                return http_agent_files(r, "list", rest);
        if (get && path_is(r->url, "/exists/", &rest))
                return http_agent_files(r, "exists", rest);
        if (path_is(r->url, "/v1/files/", &rest) || path_is(r->url, "/v1/files", NULL)) {
                if (!path_is(r->url, "/v1/files/", &rest))
                        rest = "";
                if (get)
                        return http_agent_files(r, "v1.get", rest);
                if (strcmp(r->method, "HEAD") == 0)
                        return http_agent_files(r, "v1.head", rest);
                if (strcmp(r->method, "PUT") == 0)
                        return http_agent_files(r, "v1.put", rest);
                if (strcmp(r->method, "DELETE") == 0)
                        return http_agent_files(r, "v1.delete", rest);
                return http_reply_error(r, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_params",
                                        "/v1/files takes GET, HEAD, PUT or DELETE");
        }
        return http_reply_error(r, MHD_HTTP_NOT_FOUND, "not_found", "no such endpoint: %s %.200s", r->method,
                                r->url);
}

static enum MHD_Result liveness(struct http_request *r)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *empty = json_object(), *result = NULL, *error = NULL;
        struct client *c = NULL;
        int ret = client_connect(http_config.socket_path, &c, &err);
        if (ret == 0) {
                ret = client_call(c, "server.load", empty, NULL, NULL, &result, &error, &err);
                client_close(c);
        }
        if (ret < 0)
                return http_reply_json(r, MHD_HTTP_SERVICE_UNAVAILABLE,
                                       json_pack("{s:s}", "status", "unavailable"));
        return http_reply_json(r, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"));
}

/* Requests in flight per owner, for --max-per-token: a short list (one entry
 * per owner with a request now), shared by every connection's thread. */
struct owner_load {
        uid_t uid;
        unsigned requests;
};
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static struct owner_load *loads;
static size_t n_loads, loads_cap;

/* Count a request of r->uid in; false when its owner is at --max-per-token (or out of memory). */
static bool owner_take(struct http_request *r)
{
        pthread_mutex_lock(&load_lock);
        struct owner_load *l = NULL;
        for (size_t i = 0; i < n_loads && l == NULL; i++)
                if (loads[i].uid == r->uid)
                        l = &loads[i];
        if (l == NULL && n_loads == loads_cap) {
                size_t cap = loads_cap ? 2 * loads_cap : 16;
                struct owner_load *more = reallocarray(loads, cap, sizeof(*loads));
                if (more != NULL) {
                        loads = more;
                        loads_cap = cap;
                }
        }
        if (l == NULL && n_loads < loads_cap) {
                l = &loads[n_loads++];
                *l = (struct owner_load){ .uid = r->uid };
        }
        bool ok = l != NULL && l->requests < http_config.max_per_token;
        if (ok)
                l->requests++;
        pthread_mutex_unlock(&load_lock);
        r->counted = ok;
        return ok;
}

static void owner_give(struct http_request *r)
{
        if (!r->counted)
                return;
        pthread_mutex_lock(&load_lock);
        for (size_t i = 0; i < n_loads; i++) {
                if (loads[i].uid != r->uid)
                        continue;
                if (--loads[i].requests == 0)
                        loads[i] = loads[--n_loads];
                break;
        }
        pthread_mutex_unlock(&load_lock);
        r->counted = false;
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *connection, const char *url,
                                      const char *method, const char *version, const char *upload_data,
                                      size_t *upload_data_size, void **con_cls)
{
        struct http_request *r = *con_cls;
        if (r == NULL) {
                r = calloc(1, sizeof(*r));
                if (r == NULL)
                        return MHD_NO;
                *con_cls = r;
                r->connection = connection;
                r->method = method;
                r->url = url;
                /* A probe's question, answered without a token (and without data):
                 * is nsboxd answering through this front? */
                if (strcmp(url, "/healthz") == 0 && strcmp(method, "GET") == 0)
                        return liveness(r);
                if (http_config.act_as) {
                        r->uid = authenticate(connection);
                        if (r->uid == 0)
                                return http_reply_error(
                                    r, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                                    "a valid token is required: Authorization: Bearer TOKEN");
                } else {
                        if (!from_this_host(connection))
                                return http_reply_error(
                                    r, MHD_HTTP_FORBIDDEN, "permission_denied",
                                    "without --tokens only programs of this host are served: a request "
                                    "with an Origin header (a web page's) or a Host that is not a "
                                    "loopback address is refused");
                        r->uid = getuid();
                }
                /* Without tokens, reaching the loopback port from a
                 * program of this host is the credential. */
                http_bounds_authenticated(connection);
                if (!owner_take(r))
                        return http_reply_error(
                            r, MHD_HTTP_TOO_MANY_REQUESTS, "limit_reached",
                            "this token has %u requests in progress already, the most one "
                            "token may have at once (--max-per-token)",
                            http_config.max_per_token);
                const char *length =
                    MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
                if (length != NULL && strtoull(length, NULL, 10) > HTTP_MAX_BODY)
                        return http_reply_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_params",
                                                "request bodies are limited to %u bytes", HTTP_MAX_BODY);
                return MHD_YES;
        }
        if (*upload_data_size > 0) {
                size_t n = *upload_data_size;
                *upload_data_size = 0;
                if (r->answered || r->too_large) {
                        r->body_len += n; /* counts what is thrown away */
                        return r->body_len > HTTP_MAX_DISCARD ? MHD_NO : MHD_YES;
                }
                if (r->body_len + n > HTTP_MAX_BODY) {
                        free(r->body);
                        r->body = NULL;
                        r->body_cap = 0;
                        r->body_len = n;
                        r->too_large = true; /* answered 413 once the body ends: MHD takes no
                                              * reply while a body is arriving */
                        return MHD_YES;
                }
                if (is_upload(r)) {
                        r->body_len += n;
                        if (http_agent_upload_feed(r, upload_data, n) < 0)
                                return MHD_NO;
                        return MHD_YES;
                }
                /* within HTTP_MAX_BODY, checked above */
                return http_buffer_append(&r->body, &r->body_len, &r->body_cap, upload_data, n) < 0 ? MHD_NO
                                                                                                    : MHD_YES;
        }
        if (r->too_large && !r->answered)
                return http_reply_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_params",
                                        "request bodies are limited to %u bytes", HTTP_MAX_BODY);
        if (r->answered)
                return MHD_YES;
        return route(r);
}

static void request_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                              enum MHD_RequestTerminationCode toe)
{
        http_bounds_request_done(connection);
        struct http_request *r = *con_cls;
        if (r == NULL)
                return;
        owner_give(r);
        http_agent_upload_free(r->upload);
        free(r->body);
        free(r);
        *con_cls = NULL;
}

MHD_AccessHandlerCallback http_access_handler = access_handler;
MHD_RequestCompletedCallback http_request_completed = request_completed;
