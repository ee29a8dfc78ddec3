/* SPDX-License-Identifier: Apache-2.0 */
/* The one-shot sandbox-server contract (execute.c): POST /execute {code} and
 * GET /health. A handler, above reply.h and nsboxd.h, below the router. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>

#include "request.h"

enum MHD_Result http_execute(struct http_request *r, json_t *body);
enum MHD_Result http_execute_health(struct http_request *r);
