/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-http's way to nsboxd (nsboxd.c), through common/client.h: a
 * connection acting as the request's owner, one call on it that ends when
 * the HTTP client leaves. Below the handlers. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "client.h"
#include "error.h"
#include "request.h"

/* A connection to nsboxd acting as the request's owner; -EPROTO with *error
 * (new ref) when nsboxd refuses it (auth.act_as: limit_reached). */
int http_nsboxd_connect(const struct http_request *r, struct client **out, json_t **error,
                        nsbox_error_t **err);
/* The same, or an idle one of the owner's kept by http_nsboxd_release. */
int http_nsboxd_take(const struct http_request *r, struct client **out, json_t **error, nsbox_error_t **err);
/* Done with c (NULL: nothing) of uid's: kept for uid's next request when
 * reusable (its last call was answered, nothing of it runs on), else closed. */
void http_nsboxd_release(uid_t uid, struct client *c, bool reusable);
/* Whether the HTTP client's socket fd, found readable, says the client left
 * (EOF, an error, a FIN after unread bytes); bytes alone are a pipelined request. */
bool http_client_left(int fd);
/* One call on c, which ends as soon as the HTTP client of r goes away:
 * -ECONNABORTED then (close c: nsboxd ends what the call started); else
 * as client_call, *error (new ref) holding a JSON-RPC error. */
int http_client_call(const struct http_request *r, struct client *c, const char *method, json_t *params,
                     json_t **result, json_t **error, nsbox_error_t **err);
/* The same for the HTTP client on socket fd (-1: none to watch). */
int http_client_call_fd(int fd, struct client *c, const char *method, json_t *params, json_t **result,
                        json_t **error, nsbox_error_t **err);
/* One call on a fresh connection (http_client_call); -EPROTO with *error (new ref) on a JSON-RPC error. */
int http_call(const struct http_request *r, const char *method, json_t *params, json_t **result,
              json_t **error, nsbox_error_t **err);
