/* SPDX-License-Identifier: Apache-2.0 */
/* GET /metrics: nsbox-http's counters and nsboxd's server.metrics, for a
 * Prometheus scrape with a token. */
#pragma once

#include <microhttpd.h>

#include "request.h"

enum MHD_Result http_metrics(struct http_request *r);
