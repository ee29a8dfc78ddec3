/* SPDX-License-Identifier: Apache-2.0 */
/* Requests of nsbox-http (server.h): authentication, bodies (bounded while
 * they arrive), the owner's requests in flight, and routing to the
 * handlers (rpc_api.h, execute.h, agent_sandbox.h). Above the handlers, below
 * main.c. */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "agent_sandbox.h"
#include "auth.h"
#include "bounds.h"
#include "e2b.h"
#include "e2b_ports.h"
#include "client.h"
#include "cleanup.h"
#include "counters.h"
#include "json_cleanup.h"
#include "metrics.h"
#include "reply.h"
#include "request.h"
#include "rpc_api.h"
#include "execute.h"

/* A client that goes on sending past the limit after its 413 is dropped
 * once this much more has been thrown away. */
#define HTTP_MAX_DISCARD (64u << 20)
/* "Bearer TOKEN": the token's uid, or 0. E2B's SDKs send their own
 * headers (http_e2b_authenticate). */
static uid_t authenticate(struct MHD_Connection *connection, const char *url, bool e2b)
{
        const char *auth =
            MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (e2b)
                return http_e2b_authenticate(connection, url);
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

/* Host: 127.x.y.z, localhost, a name under .localhost (RFC 6761: browsers
 * resolve them to loopback themselves, never through DNS, so no rebinding
 * gives one) or [::1], with or without a port. */
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
        size_t len = strlen(name);
        if (strcasecmp(name, "localhost") == 0 ||
            (len > 10 && strcasecmp(name + len - 10, ".localhost") == 0))
                return true;
        return inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* Whether an Origin is the request's own Host (a page's request to where
 * it came from): http:// or https:// and the Host's text. */
static bool same_origin(const char *origin, const char *host)
{
        const char *rest = strncmp(origin, "https://", 8) == 0  ? origin + 8
                           : strncmp(origin, "http://", 7) == 0 ? origin + 7
                                                                : NULL;
        return rest != NULL && host != NULL && strcasecmp(rest, host) == 0;
}

/* Without tokens, reaching the loopback port is the only credential, and a
 * browser reaches it for any web page: a cross-site "simple" POST (no
 * preflight) carries an Origin, a DNS-rebound name a Host of that name.
 * Programs (curl, SDKs) send neither; a browser's request from another
 * site without an Origin (a GET of an <img>) says Sec-Fetch-Site. A sandbox's port named by its Host
 * (PORT-ID.DOMAIN) serves a browser's page and its own requests (noVNC's
 * WebSocket carries the page's Origin): an Origin of that same name. */
static bool from_this_host(struct http_request *r)
{
        const char *host = MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        const char *origin = MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, "Origin");
        /* a browser says where a request comes from even when it sends no
         * Origin (an <img> of another page): "none" is the user's own */
        const char *site = MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, "Sec-Fetch-Site");
        if (site != NULL && strcmp(site, "same-origin") != 0 && strcmp(site, "none") != 0)
                return false;
        if (origin != NULL && !(r->host_sandbox != NULL && same_origin(origin, host)))
                return false;
        return host == NULL || loopback_host(host);
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

/* PUT /v1/files/PATH: its body goes to the file as it arrives. */
static bool is_put(const struct http_request *r, const char **path)
{
        const char *rest;
        if (path == NULL)
                path = &rest;
        return strcmp(r->method, "PUT") == 0 && path_is(r->url, "/v1/files/", path);
}

/* What probes ask: agent-sandbox's runtime (/, its sandboxd /v1/health),
 * the one-shot contract's server (/health), a kubelet (/healthz). */
static bool is_probe(const char *method, const char *url)
{
        return strcmp(method, "GET") == 0 && (strcmp(url, "/health") == 0 || strcmp(url, "/v1/health") == 0 ||
                                              strcmp(url, "/healthz") == 0 || strcmp(url, "/") == 0);
}

/* Every request's whole body is here: answer it. */
static enum MHD_Result route(struct http_request *r)
{
        const char *rest;
        bool get = strcmp(r->method, "GET") == 0, post = strcmp(r->method, "POST") == 0;
        enum MHD_Result ret;
        if (r->e2b)
                return http_e2b_route(r);
        if (post && path_is(r->url, "/v1/rpc/", &rest))
                return http_rpc_handle(r, rest);
        if (post && path_is(r->url, "/v1/rpc", NULL))
                return http_rpc_handle(r, NULL);
        if (post && path_is(r->url, "/execute", NULL)) {
                _cleanup_json_ json_t *body = http_body_object(r, &ret);
                if (body == NULL)
                        return ret;
                /* The one-shot contract sends code; agent-sandbox's sends command. */
                if (json_object_get(body, "code") != NULL)
                        return http_execute(r, body);
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
                return http_execute_health(r);
        if (is_upload(r))
                return http_agent_upload_finish(r);
        if (get && path_is(r->url, "/metrics", NULL))
                return http_metrics(r);
        if (get && path_is(r->url, "/v1/metadata", NULL))
                return http_agent_metadata(r);
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

/* Whether the request has an owner, then r->uid: its token's with tokens,
 * else this process's (loopback: for a program of this host only; behind a
 * network policy: for any client). */
static bool request_owner(struct http_request *r)
{
        if (http_config.act_as) {
                r->uid = authenticate(r->connection, r->url, r->e2b);
                return r->uid != 0;
        }
        if (!http_config.no_auth && !from_this_host(r))
                return false;
        r->uid = getuid();
        return true;
}

/* Count a request of r->uid in; false when its owner is at --max-per-token. */
static bool owner_take(struct http_request *r)
{
        r->counted = http_bounds_owner_take(r->uid, http_config.max_per_token);
        return r->counted;
}

static void owner_give(struct http_request *r)
{
        if (!r->counted)
                return;
        http_bounds_owner_give(r->uid);
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
                struct timespec now;
                clock_gettime(CLOCK_MONOTONIC, &now);
                r->started_ns = (long long)now.tv_sec * 1000000000 + now.tv_nsec;
                int e2b = http_e2b_wants(r);
                if (e2b == -EEXIST)
                        return http_e2b_refuse(r, MHD_HTTP_BAD_REQUEST,
                                               "the Host names a sandbox's port: E2b-Sandbox-Id and "
                                               "E2b-Sandbox-Port may name that sandbox and port only");
                if (e2b < 0)
                        return http_e2b_refuse(r, MHD_HTTP_BAD_REQUEST,
                                               "the Host names no sandbox's port: PORT-SANDBOXID.DOMAIN "
                                               "under --e2b-domain, as E2B's getHost(port) gives it");
                r->e2b = e2b > 0;
                bool owned = request_owner(r);
                /* A probe's question, answered without a token (and without data:
                 * a valid token sees the load): is nsboxd answering through this
                 * front? Probes send no token (agent-sandbox's routers strip
                 * Authorization, a kubelet has none). */
                if (!r->e2b && is_probe(method, url) && (!owned || strcmp(url, "/healthz") == 0))
                        return liveness(r);
                if (!owned && r->e2b && http_config.act_as)
                        return http_e2b_refuse(
                            r, MHD_HTTP_UNAUTHORIZED,
                            "a valid X-API-KEY (or the sandbox's access token) is required");
                if (!owned && http_config.act_as)
                        return http_reply_error(r, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                                                "a valid token is required: Authorization: Bearer TOKEN");
                if (!owned)
                        return http_reply_error(
                            r, MHD_HTTP_FORBIDDEN, "permission_denied",
                            "without --tokens only programs of this host are served: a request "
                            "with an Origin header (a web page's; but a sandbox's port's own page), "
                            "a Sec-Fetch-Site other than same-origin or none, or a Host that is not "
                            "a loopback address is refused");
                /* Without tokens, reaching the loopback port from a
                 * program of this host is the credential. */
                if (!http_bounds_authenticated(connection))
                        return MHD_NO;
                if (!owner_take(r))
                        return http_reply_error(
                            r, MHD_HTTP_TOO_MANY_REQUESTS, "limit_reached",
                            "this token has %u requests in progress already, the most one "
                            "token may have at once (--max-per-token)",
                            http_config.max_per_token);
                const char *length =
                    MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
                /* an upload goes to its file as it arrives: any size */
                if (length != NULL && strtoull(length, NULL, 10) > HTTP_MAX_BODY && !is_upload(r) &&
                    !is_put(r, NULL))
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
                const char *put_path = NULL;
                if (is_upload(r) || is_put(r, &put_path)) {
                        r->body_len += n;
                        int fed = is_upload(r) ? http_agent_upload_feed(r, upload_data, n)
                                               : http_agent_put_feed(r, put_path, upload_data, n);
                        return fed < 0 ? MHD_NO : MHD_YES;
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
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        http_counters_request(r->method, r->url, r->status,
                              (double)((long long)now.tv_sec * 1000000000 + now.tv_nsec - r->started_ns) /
                                  1e9);
        owner_give(r);
        http_e2b_port_request_done(r, toe);
        http_agent_upload_free(r->upload);
        free(r->host_sandbox);
        free(r->body);
        free(r);
        *con_cls = NULL;
}

MHD_AccessHandlerCallback http_access_handler = access_handler;
MHD_RequestCompletedCallback http_request_completed = request_completed;
