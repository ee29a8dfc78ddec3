/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's control plane (e2b_api.c): POST /sandboxes, GET/DELETE
 * /sandboxes/{id}, GET /v2/sandboxes with its filters and pages, timeout,
 * connect, pause, resume, metrics, network, snapshots and fork, on
 * nsboxd's sandbox.* and snapshot.* methods; any other path of E2B's API
 * answers 501. A handler of the router. */
#pragma once

#include <microhttpd.h>

#include "request.h"

/* The envd version nsbox answers with: the SDKs turn on what it has. */
#define E2B_ENVD_VERSION "0.6.1"

enum MHD_Result http_e2b_api(struct http_request *r);
