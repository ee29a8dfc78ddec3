/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.stats, sandbox.info's stats and server.metrics. */
#pragma once

#include <jansson.h>

#include "rpc.h"
#include "sandbox.h"

/* What sb uses now: memory, cpu, processes, OOM kills and its disk. */
json_t *sandbox_stats(struct sandbox *sb);

void sandbox_method_stats(struct rpc_request *req, struct sandbox *sb);  /* sandbox.stats {sandbox_id?} */
void server_method_metrics(struct rpc_request *req, struct sandbox *sb); /* server.metrics */
