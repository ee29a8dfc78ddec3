/* SPDX-License-Identifier: Apache-2.0 */
/* The blocking JSON-RPC client of nsboxd that every front shares: the CLI,
 * the MCP server and nsbox-http. */
#pragma once

#include <jansson.h>

#include "error.h"

struct client;

typedef void (*client_notify_cb)(const char *method, json_t *params, void *data);

/* The socket from --socket, else $NSBOX_SOCKET, else the default. */
const char *client_socket_path(const char *flag);

int client_connect(const char *path, struct client **out, nsbox_error_t **err);
void client_close(struct client *c);
int client_fd(const struct client *c);
/* While fd (e.g. a signalfd) is readable, client_call stops waiting and
 * fails with -EINTR. -1 turns it off. The fd stays the caller's. */
void client_set_interrupt_fd(struct client *c, int fd);

/* Send a request and wait for its response; notifications that arrive in
 * between go to `notify`. On success *result is a new reference. On a
 * JSON-RPC error returns -EPROTO with *err holding the message and
 * *error_out (if given) the error object (new reference). */
int client_call(struct client *c, const char *method, json_t *params, client_notify_cb notify, void *data,
                json_t **result, json_t **error_out, nsbox_error_t **err);
/* Wait for the response to request `id` (from client_send), as client_call
 * does; after -EINTR the same request can be waited for again. */
int client_wait(struct client *c, long long id, client_notify_cb notify, void *data, json_t **result,
                json_t **error_out, nsbox_error_t **err);
/* One step of client_wait: 1 after a notification (given to notify), 0
 * with the answer, or the error; for a caller that acts between them. */
int client_wait_one(struct client *c, long long id, client_notify_cb notify, void *data, json_t **result,
                    json_t **error_out, nsbox_error_t **err);
/* Called by client_send before a request with a string params.sandbox_id
 * goes out; it may replace that id (the CLI turns a session name into the
 * id, cli_resolve_sandbox_param). NULL (the default): ids go as given. */
typedef int (*client_resolve_fn)(struct client *c, json_t *params, nsbox_error_t **err);
void client_set_resolver(client_resolve_fn fn);
/* Send a request without waiting (for cancellation and pipelining). */
int client_send(struct client *c, const char *method, json_t *params, long long *id_out, nsbox_error_t **err);
