/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd's counters for its metrics: requests by method and outcome with
 * their latency, sandboxes made and removed (by reason), execs; written in
 * the Prometheus text format by server.metrics. */
#include "metrics.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

/* Upper bounds of the latency buckets, in seconds (Prometheus' le). */
static const double bucket_le[] = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                    0.1,    0.25,  0.5,    1,     2.5,  5,     10 };
#define BUCKETS (sizeof(bucket_le) / sizeof(bucket_le[0]))

struct histogram {
        uint64_t bucket[BUCKETS]; /* cumulative when written, per bucket here */
        uint64_t count;
        double sum;
};

/* One series per (name, label): a bounded set, since methods, outcomes and
 * removal reasons are strings of nsboxd's own code, never a client's. */
struct series {
        const char *family;
        char *label;
        uint64_t count;
        struct histogram *hist;
        struct series *next;
};

static struct series *all;

static struct series *series_of(const char *family, const char *label, bool with_histogram)
{
        for (struct series *s = all; s != NULL; s = s->next) {
                if (s->family == family && strcmp(s->label, label) == 0)
                        return s;
        }
        struct series *s = calloc(1, sizeof(*s));
        if (s == NULL || (s->label = strdup(label)) == NULL ||
            (with_histogram && (s->hist = calloc(1, sizeof(*s->hist))) == NULL)) {
                if (s != NULL)
                        free(s->label);
                free(s);
                return NULL;
        }
        s->family = family;
        s->next = all;
        all = s;
        return s;
}

static void observe(struct histogram *h, double seconds)
{
        for (size_t i = 0; i < BUCKETS; i++) {
                if (seconds <= bucket_le[i]) {
                        h->bucket[i]++;
                        break;
                }
        }
        h->count++;
        h->sum += seconds;
}

static const char REQUESTS[] = "nsbox_requests_total";
static const char REQUEST_SECONDS[] = "nsbox_request_duration_seconds";
static const char EVENTS[] = "nsbox_events_total";

void metrics_request_done(const char *method, const char *outcome, double seconds)
{
        char label[192];
        snprintf(label, sizeof(label), "method=\"%.64s\",outcome=\"%.64s\"", method,
                 outcome ? outcome : "ok");
        struct series *s = series_of(REQUESTS, label, false);
        if (s != NULL)
                s->count++;
        snprintf(label, sizeof(label), "method=\"%.64s\"", method);
        if ((s = series_of(REQUEST_SECONDS, label, true)) != NULL)
                observe(s->hist, seconds);
}

/* A reason's kind, for a label: its words before the first number or
 * parenthesis ("idle for 300s (...)" is "idle for"), so that the series
 * stay as few as the reasons nsboxd's code can give. */
static void reason_kind(const char *reason, char *out, size_t len)
{
        size_t n = strcspn(reason, "0123456789(:\"\\\n");
        while (n > 0 && reason[n - 1] == ' ')
                n--;
        if (n >= len)
                n = len - 1;
        memcpy(out, reason, n);
        out[n] = '\0';
}

void metrics_event(const char *type, const char *reason)
{
        char label[192], kind[64];
        if (reason != NULL) {
                reason_kind(reason, kind, sizeof(kind));
                snprintf(label, sizeof(label), "type=\"%.64s\",reason=\"%s\"", type, kind);
        } else
                snprintf(label, sizeof(label), "type=\"%.64s\"", type);
        struct series *s = series_of(EVENTS, label, false);
        if (s != NULL)
                s->count++;
}

static void write_family(FILE *out, const char *family, const char *type, const char *help)
{
        bool first = true;
        for (struct series *s = all; s != NULL; s = s->next) {
                if (s->family != family)
                        continue;
                if (first) {
                        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", family, help, family, type);
                        first = false;
                }
                if (s->hist == NULL) {
                        fprintf(out, "%s{%s} %llu\n", family, s->label, (unsigned long long)s->count);
                        continue;
                }
                uint64_t cumulative = 0;
                for (size_t i = 0; i < BUCKETS; i++) {
                        cumulative += s->hist->bucket[i];
                        fprintf(out, "%s_bucket{%s,le=\"%g\"} %llu\n", family, s->label, bucket_le[i],
                                (unsigned long long)cumulative);
                }
                fprintf(out, "%s_bucket{%s,le=\"+Inf\"} %llu\n%s_sum{%s} %.6f\n%s_count{%s} %llu\n", family,
                        s->label, (unsigned long long)s->hist->count, family, s->label, s->hist->sum, family,
                        s->label, (unsigned long long)s->hist->count);
        }
}

void metrics_write_counters(FILE *out)
{
        write_family(out, REQUESTS, "counter",
                     "JSON-RPC requests answered, by method and outcome (ok or the error kind)");
        write_family(out, REQUEST_SECONDS, "histogram", "Time from a request's dispatch to its answer");
        write_family(out, EVENTS, "counter",
                     "Lifecycle events: sandboxes created, removed (by reason), paused, resumed; execs "
                     "started and ended");
}
