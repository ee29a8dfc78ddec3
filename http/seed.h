/* SPDX-License-Identifier: Apache-2.0 */
/* The seed's sandbox-server contract (seed.c): POST /execute {code} and
 * GET /health. A handler, above reply.h and nsboxd.h, below the router. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>

#include "request.h"

enum MHD_Result http_seed_execute(struct http_request *r, json_t *body);
enum MHD_Result http_seed_health(struct http_request *r);
