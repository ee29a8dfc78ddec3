/* SPDX-License-Identifier: Apache-2.0 */
/* Client connections of nsboxd: accept, SO_PEERCRED, line framing,
 * dispatch, replies and notifications, back-pressure. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "error.h"
#include "jsonrpc.h"
#include "loop.h"

struct rpc_conn;

/* One request in flight. The handler owns it and must finish it exactly
 * once with rpc_reply_result() or rpc_reply_error(), now or later. */
struct rpc_request;
typedef void (*rpc_disconnect_cb)(struct rpc_request *req, void *data);

struct rpc_request {
        struct rpc_conn *conn;
        struct jsonrpc_request msg;
        uid_t uid; /* from SO_PEERCRED (or auth.act_as), never from the request */
        gid_t gid;
        pid_t pid;
        bool acted;     /* uid was set by auth.act_as ... */
        uid_t acted_by; /* ... of this SO_PEERCRED uid (audit lines say so) */
        /* set by rpc_request_on_disconnect() */
        rpc_disconnect_cb on_disconnect;
        void *disconnect_data;
        struct rpc_request *prev_watch, *next_watch;
        /* set by rpc_request_on_resume() */
        rpc_disconnect_cb on_resume;
        void *resume_data;
        struct rpc_request *prev_resume, *next_resume;
        bool parsed_off_loop;    /* a large line: its tree is freed by the parse thread too */
        long long dispatched_ns; /* CLOCK_MONOTONIC, for the request's latency in metrics */
};

struct rpc_server_config {
        const char *socket_path;
        /* The method of a name (NULL: unknown, answered -32601), and how to
         * run a request of it: the daemon's method table (methods.h). */
        const void *(*find_method)(const char *name);
        void (*run_method)(const void *method, struct rpc_request *req);
        int listen_fd; /* a listening socket passed by systemd (socket activation), or -1 */
};

int rpc_server_start(struct loop *loop, const struct rpc_server_config *config, nsbox_error_t **err);
void rpc_server_stop(void);

/* result: stolen reference. */
void rpc_reply_result(struct rpc_request *req, json_t *result);
void rpc_reply_error(struct rpc_request *req, int code, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Application error (-32000) with a data.kind. */
#define rpc_reply_fail(req, kind, ...) rpc_reply_error(req, JSONRPC_APP_ERROR, kind, __VA_ARGS__)
/* The same with data.errno, the errno's name (e.g. "ENOTEMPTY"): a reason a
 * client can act on without reading the message. */
void rpc_reply_fail_errno(struct rpc_request *req, const char *kind, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The same with more fields in data (taken over; kind and errno win). */
void rpc_reply_fail_data(struct rpc_request *req, const char *kind, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Notification to the request's client, if it is still connected. params: borrowed. */
void rpc_notify(struct rpc_request *req, const char *method, json_t *params);
bool rpc_request_connected(const struct rpc_request *req);
/* auth.act_as {uid}: the request's connection serves that uid from now on
 * (for a trusted front: root or nsboxd's own uid, once per connection). */
void rpc_act_as(struct rpc_request *req);
/* Parameter checks that answer -32602 themselves and return false. */
bool rpc_check_fields(struct rpc_request *req, const char *const *known);
bool rpc_get_bool(struct rpc_request *req, const char *key, bool *out);
/* Call cb once if the client goes away before the request is answered
 * (e.g. to kill the work nobody will read). cb may answer the request. */
void rpc_request_on_disconnect(struct rpc_request *req, rpc_disconnect_cb cb, void *data);

/* What an upper layer keeps per connection (the file API: the temporary
 * files its fs.write made): `end` runs once, when the connection has
 * closed and the last of its requests is answered, so that nothing of the
 * connection runs on; it may be from inside that last answer. One state
 * per key (the layer's own address). */
struct rpc_conn_state {
        const void *key;
        void (*end)(struct rpc_conn_state *state);
        struct rpc_conn_state *next;
};
/* The state of key on req's connection, or NULL. */
struct rpc_conn_state *rpc_conn_state_get(const struct rpc_request *req, const void *key);
/* Hand `state` (key and end set) to req's connection. */
void rpc_conn_state_add(struct rpc_request *req, struct rpc_conn_state *state);

/* Back-pressure for producers of streamed output (exec and python.run
 * notifications): true while the request's client has more output waiting
 * than it may hold, i.e. over its own cap (a few MB), or over its fair
 * share of the global budget (max_buffer_bytes / connections) while that
 * budget is exhausted, or behind a large reply still being serialized.
 * A producer that sees it stops reading its source (e.g. the exec's pipes:
 * loop_modify(..., 0)) and calls rpc_request_on_resume(); notifications
 * sent anyway are still queued (and charged), never lost. A client that
 * stays over its share without reading for long is disconnected, so a
 * producer waiting on it also hears of the disconnect. */
bool rpc_request_backlogged(const struct rpc_request *req);
/* Call cb once, from the loop, when the request's connection is no longer
 * backlogged or has been closed (then rpc_request_connected() is false).
 * Replaces an earlier cb (NULL: stop waiting); cleared when the request is
 * answered. cb may answer the request. */
void rpc_request_on_resume(struct rpc_request *req, rpc_disconnect_cb cb, void *data);

/* Once per second from the daemon's tick: closes connections idle longer
 * than client_idle_timeout_seconds, partial request lines older than
 * request_timeout_seconds, and clients that hold more than their share of
 * an exhausted output budget without reading. */
void rpc_server_tick(void);
/* SIGTERM: from now on every new request is answered -32000 "unavailable"
 * (requests in flight finish as usual). */
void rpc_server_refuse_requests(void);
