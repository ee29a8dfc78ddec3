/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's code interpreter (e2b_interp.c): POST /execute streams NDJSON of a
 * cell run by nsbox's stateful Python (python.run), /contexts lists, makes,
 * restarts and removes contexts. A handler of the router. */
#pragma once

#include <microhttpd.h>

#include "request.h"

enum MHD_Result http_e2b_interpreter(struct http_request *r, const char *sandbox_id);
