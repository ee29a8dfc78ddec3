/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-http's own counters for GET /metrics: requests by path and status
 * with their latency, and connections its bounds cut off. Thread-safe. */
#pragma once

#include <stdio.h>

/* A request answered (status 0: none was queued, the connection ended). */
void http_counters_request(const char *method, const char *url, unsigned status, double seconds);
/* A connection a bound refused or closed: "per_address", "full", "evicted", "header_timeout". */
void http_counters_cut(const char *why);
/* Everything counted, in the Prometheus text format. */
void http_counters_write(FILE *out);
