/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-http: an HTTP front of nsboxd (libmicrohttpd, one thread per
 * connection). Every request is served over its own connection to nsboxd's
 * unix socket, made the token's owner with auth.act_as, so nsboxd applies
 * ownership and per-uid quotas as for a local client of that uid. */
#pragma once

#include <jansson.h>
#include <stdarg.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "client.h"
#include "error.h"

/* Request bodies beyond this are answered 413 while they arrive. */
#define HTTP_MAX_BODY (10u << 20)

struct http_config {
        const char *socket_path;  /* nsboxd's */
        bool act_as;              /* tokens: each request acts as its token's uid */
        unsigned timeout_seconds; /* a connection idle this long is closed */
        unsigned max_per_token;   /* requests of one owner served at once; more get 429 */
        /* sandbox.create params of the sandboxes POST /execute {code} makes
         * (--execute-sandbox JSON), e.g. an image, limits, env or network */
        json_t *execute_sandbox;
};
extern struct http_config http_config;

/* --- tokens (auth.c) --- */
int http_tokens_load(const char *path, nsbox_error_t **err);
void http_tokens_clear(void);
/* The uid of a presented token, or 0 when it is no token of the file. Every
 * entry is compared, in constant time, whatever matches. */
uid_t http_tokens_lookup(const char *token, size_t len);

/* --- what a peer without a token can hold (bounds.c) --- */
struct http_bounds {
        unsigned header_timeout_seconds; /* a request's headers with a valid token, from accept or
                                          * the previous request's end: else the connection is closed */
        unsigned max_per_address;        /* connections of one client address; more are refused */
        unsigned max_unauthenticated;    /* connections before a valid token; one more evicts the oldest */
        unsigned max_connections;        /* connections not cut; more are refused */
};
/* MHD's connection limit is --max-connections plus this many, for the
 * connections cut (shut down) and not yet closed by MHD's thread. */
#define HTTP_BOUNDS_DYING(max_connections) ((max_connections) / 4 + 16)
/* Start the watchdog that closes connections past their deadline. */
int http_bounds_start(const struct http_bounds *config, nsbox_error_t **err);
void http_bounds_stop(void);
/* MHD_OPTION_ACCEPT_POLICY and MHD_OPTION_NOTIFY_CONNECTION of the daemon. */
enum MHD_Result http_bounds_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);
void http_bounds_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                        enum MHD_ConnectionNotificationCode code);
/* A request on the connection passed the token check (or, without tokens,
 * the from-this-host check): its deadline is off while the request runs. */
void http_bounds_authenticated(struct MHD_Connection *connection);
/* A request ended (MHD_OPTION_NOTIFY_COMPLETED): if it was authenticated,
 * the next one's headers have --header-timeout from now. */
void http_bounds_request_done(struct MHD_Connection *connection);
/* MHD_OPTION_EXTERNAL_LOGGER: MHD's messages, each at most once a second. */
void http_bounds_mhd_log(void *cls, const char *fmt, va_list ap);

/* --- one request being served (server.c) --- */
struct http_upload; /* multipart state of POST /upload */

struct http_request {
        struct MHD_Connection *connection;
        const char *method; /* "GET", "POST", ... */
        const char *url;    /* path, percent-decoded */
        uid_t uid;          /* the token's (0: no tokens, nsbox-http's own) */
        char *body;
        size_t body_len, body_cap;
        struct http_upload *upload;
        bool counted;   /* counted in its owner's requests in flight */
        bool answered;  /* a response was queued before the body ended */
        bool too_large; /* the body went over HTTP_MAX_BODY: the rest is thrown away */
};

/* Queue a response; these return the MHD_Result of MHD_queue_response. */
enum MHD_Result http_reply_json(struct http_request *r, unsigned status, json_t *body); /* body: stolen */
enum MHD_Result http_reply_error(struct http_request *r, unsigned status, const char *kind, const char *fmt,
                                 ...) __attribute__((format(printf, 4, 5)));
enum MHD_Result http_reply_bytes(struct http_request *r, unsigned status, const char *content_type,
                                 void *data, size_t len); /* data: malloc'd, stolen */
/* A 200 whose body `read` produces as it comes (chunked, no-cache); `done`
 * frees data, also when the response cannot be made. */
enum MHD_Result http_reply_stream(struct http_request *r, const char *content_type,
                                  MHD_ContentReaderCallback read, void *data,
                                  MHD_ContentReaderFreeCallback done);
/* An nsboxd JSON-RPC error object (or a failure to reach nsboxd: error NULL)
 * as the HTTP status its kind maps to, body {"error":{"kind","message"}}. */
enum MHD_Result http_reply_rpc_error(struct http_request *r, json_t *error, const nsbox_error_t *err);
unsigned http_status_of_rpc_error(json_t *error, const char **kind);

/* A connection to nsboxd acting as the request's owner; -EPROTO with *error
 * (new ref) when nsboxd refuses it (auth.act_as: limit_reached). */
int http_nsboxd_connect(const struct http_request *r, struct client **out, json_t **error,
                        nsbox_error_t **err);
/* One call on a fresh connection; -EPROTO with *error (new ref) on a JSON-RPC error. */
int http_call(const struct http_request *r, const char *method, json_t *params, json_t **result,
              json_t **error, nsbox_error_t **err);
/* Append n bytes to a growing buffer (doubling from 16 KiB, never past
 * HTTP_MAX_BODY while it fits); -ENOMEM. */
int http_buffer_append(char **data, size_t *len, size_t *cap, const void *more, size_t n);
/* Write base64 content to a path of a sandbox over c, its parent
 * directories made first (fs.mkdir parents, fs.write). */
int http_sandbox_write(struct client *c, const char *sandbox_id, const char *path, const char *base64,
                       json_t **error, nsbox_error_t **err);
/* The request body as JSON (an object), or a 400 queued and NULL returned. */
json_t *http_body_object(struct http_request *r, enum MHD_Result *ret);

/* --- handlers: answer the request (after its whole body arrived) --- */
enum MHD_Result http_rpc_handle(struct http_request *r, const char *method); /* rpc_api.c */
enum MHD_Result http_seed_execute(struct http_request *r, json_t *body);     /* seed.c */
enum MHD_Result http_seed_health(struct http_request *r);
enum MHD_Result http_agent_execute(struct http_request *r, json_t *body); /* agent_sandbox.c */
enum MHD_Result http_agent_execute_stateful(struct http_request *r, json_t *body);
enum MHD_Result http_agent_upload_finish(struct http_request *r);
enum MHD_Result http_agent_files(struct http_request *r, const char *kind, const char *path);
/* Feed multipart data of POST /upload (MHD's post processor parses it). */
int http_agent_upload_feed(struct http_request *r, const char *data, size_t len);
void http_agent_upload_free(struct http_upload *u);
