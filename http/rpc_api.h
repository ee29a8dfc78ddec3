/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox's own API over HTTP (rpc_api.c): POST /v1/rpc[/METHOD]. A handler,
 * above reply.h and nsboxd.h, below the router. */
#pragma once

#include <microhttpd.h>

#include "request.h"

/* Answer the request (its whole body arrived): METHOD from the path, or
 * NULL for a JSON-RPC request in the body. */
enum MHD_Result http_rpc_handle(struct http_request *r, const char *method);
