/* SPDX-License-Identifier: Apache-2.0 */
/* What a peer without a token can hold of nsbox-http (bounds.c): MHD's
 * accept policy and connection notifications, a watchdog for the headers'
 * deadline. Below the router. */
#pragma once

#include <stdbool.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "error.h"

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
 * the from-this-host check): its deadline is off while the request runs.
 * False when the connection was cut meanwhile (its deadline passed, or it
 * was evicted): the request must not run, nobody would read its answer. */
bool http_bounds_authenticated(struct MHD_Connection *connection);
/* The request's answer upgrades the connection (a WebSocket): MHD ends the
 * request when it is sent, and the connection has no deadline after it. */
void http_bounds_upgraded(struct MHD_Connection *connection);
/* A request ended (MHD_OPTION_NOTIFY_COMPLETED): if it was authenticated,
 * the next one's headers have --header-timeout from now. */
void http_bounds_request_done(struct MHD_Connection *connection);
/* MHD_OPTION_EXTERNAL_LOGGER: MHD's messages, each at most once a second. */
void http_bounds_mhd_log(void *cls, const char *fmt, va_list ap);
/* Count one more request (or held connection) of an owner in; false, and
 * nothing counted, when it has `max` already (--max-per-token) or out of
 * memory. http_bounds_owner_give counts it out. */
bool http_bounds_owner_take(uid_t uid, unsigned max);
void http_bounds_owner_give(uid_t uid);
