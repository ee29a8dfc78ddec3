/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's API on nsbox-http (e2b.c): the router's one entry for a request of
 * E2B's SDKs, which it passes on by the sandbox and port its headers name
 * (envd's, the code interpreter's) or to the control plane. Above the
 * E2B handlers, below the router. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>
#include <sys/types.h>

#include "request.h"

/* Whether a request is E2B's (its headers or its Host name a sandbox, or a
 * control-plane path): 1 or 0; e2b_ports_from_host's -errno for a Host
 * under --e2b-domain that is not PORT-ID.DOMAIN or whose sandbox or port
 * E2B's headers contradict. */
int http_e2b_wants(struct http_request *r);
/* The owner of an E2B request's credentials (X-API-KEY, for a sandbox's
 * envd and interpreter (and its other ports) its access token, for a
 * volume's content (`url`) the volume's token), or 0. */
uid_t http_e2b_authenticate(struct MHD_Connection *connection, const char *url);
enum MHD_Result http_e2b_route(struct http_request *r);
/* A refusal as E2B's SDKs read it. */
enum MHD_Result http_e2b_refuse(struct http_request *r, unsigned status, const char *message);
