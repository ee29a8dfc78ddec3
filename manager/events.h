/* SPDX-License-Identifier: Apache-2.0 */
/* Lifecycle events of sandboxes for events.subscribe streams and metrics. */
#pragma once

#include <jansson.h>

#include "rpc.h"
#include "sandbox.h"

#define EVENTS_SUBSCRIBERS_PER_UID 16

/* type: "sandbox.created", "sandbox.removed", "sandbox.paused",
 * "sandbox.resumed", "exec.started", "exec.ended"; reason: why (e.g. a
 * removal's) or NULL; fields: more members, stolen, may be NULL. */
void events_emit(const struct sandbox *sb, const char *type, const char *reason, json_t *fields);

/* Whether anyone subscribes: the fields of an event are built only then. */
bool events_wanted(void);

/* events.subscribe {sandbox_id?}: answered only when the client leaves. */
void events_method_subscribe(struct rpc_request *req, struct sandbox *sb);
