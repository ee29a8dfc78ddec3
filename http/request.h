/* SPDX-License-Identifier: Apache-2.0 */
/* The bottom of nsbox-http: the front's settings (set by main.c from its
 * options) and one request being served, which every other unit of http/
 * takes. nsbox-http is an HTTP front of nsboxd (libmicrohttpd, one thread
 * per connection). Every request is served over its own connection to
 * nsboxd's unix socket, made the token's owner with auth.act_as, so
 * nsboxd applies ownership and per-uid quotas as for a local client of
 * that uid. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Request bodies beyond this are answered 413 while they arrive. */
#define HTTP_MAX_BODY (10u << 20)

struct http_config {
        const char *socket_path;  /* nsboxd's */
        bool act_as;              /* tokens: each request acts as its token's uid */
        bool no_auth;             /* --insecure-no-auth-behind-network-policy: any client is this uid */
        unsigned timeout_seconds; /* a connection idle this long is closed */
        unsigned max_per_token;   /* requests of one owner served at once; more get 429 */
        /* --keepalive-seconds: a relayed WebSocket's peer silent this long is
         * probed, and let go when it stops answering (e2b_ports.h) */
        unsigned keepalive_seconds;
        /* sandbox.create params of the sandboxes POST /execute {code} makes
         * (--execute-sandbox JSON), e.g. an image, limits, env or network */
        json_t *execute_sandbox;
        /* --e2b-domain NAME[:PORT]: a Host PORT-ID.NAME names a sandbox's port (e2b_ports.h) */
        const char *e2b_domain;
};
extern struct http_config http_config;

struct MHD_Connection;
struct http_upload; /* multipart state of POST /upload (agent_sandbox.c) */

struct http_request {
        struct MHD_Connection *connection;
        const char *method; /* "GET", "POST", ... */
        const char *url;    /* path, percent-decoded */
        uid_t uid;          /* the token's (0: no tokens, nsbox-http's own) */
        char *body;
        size_t body_len, body_cap;
        struct http_upload *upload;
        bool counted;         /* counted in its owner's requests in flight */
        unsigned status;      /* of the reply queued, 0 until then */
        long long started_ns; /* CLOCK_MONOTONIC, when its headers were in */
        bool answered;        /* a response was queued before the body ended */
        bool too_large;       /* the body went over HTTP_MAX_BODY: the rest is thrown away */
        bool e2b;             /* a request of E2B's SDKs (e2b.h) */
        char *host_sandbox;   /* the sandbox its Host names (e2b_ports.h), or NULL */
        char host_port[8];    /* and the port */
        void *upgrade;        /* its WebSocket's relay until MHD starts it (e2b_ports.h) */
};

/* Append n bytes to a growing buffer (doubling from 16 KiB, never past
 * HTTP_MAX_BODY while it fits); -ENOMEM. */
int http_buffer_append(char **data, size_t *len, size_t *cap, const void *more, size_t n);
