/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd's counters for server.metrics (Prometheus text format). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* A request answered: outcome is its error kind, NULL for a result. */
void metrics_request_done(const char *method, const char *outcome, double seconds);
/* A lifecycle event (events.h's types), with its reason or NULL. */
void metrics_event(const char *type, const char *reason);
/* The counters and histograms, with their HELP and TYPE lines. */
void metrics_write_counters(FILE *out);
