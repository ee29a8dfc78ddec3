/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd's JSON-RPC methods: one table with declarative flags (needs a
 * sandbox, resumes a paused one, counts as activity) and its dispatcher. */
#pragma once

#include "rpc.h"

/* The method of a name, or NULL: unknown. */
const void *methods_find(const char *name);
/* Run a request of that method: its params checked where the table lists
 * them, its sandbox resolved once, resumed or touched as its flags say,
 * then its handler. */
void methods_run(const void *method, struct rpc_request *req);
