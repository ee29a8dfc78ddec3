/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-http's counters (counters.h): a few fixed series under one mutex,
 * labelled by what nsbox-http serves, never by a client's text. */
#include "counters.h"

#include <pthread.h>
#include <string.h>

/* The first path segments nsbox-http answers; anything else is "other". */
static const char *const paths[] = { "v1",       "execute",   "execute_command_stateful",
                                     "health",   "healthz",   "upload",
                                     "download", "list",      "exists",
                                     "metrics",  "sandboxes", "",
                                     "other" };
#define PATHS (sizeof(paths) / sizeof(paths[0]))
#define OTHER (PATHS - 1)
static const char *const methods[] = { "GET", "POST", "PUT", "DELETE", "HEAD", "other" };
#define METHODS (sizeof(methods) / sizeof(methods[0]))
/* Status classes: 0 (none), 1xx..5xx. */
#define CLASSES 6
static const double bucket_le[] = { 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 300 };
#define BUCKETS (sizeof(bucket_le) / sizeof(bucket_le[0]))
static const char *const cuts[] = { "per_address", "full", "evicted", "header_timeout" };
#define CUTS (sizeof(cuts) / sizeof(cuts[0]))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long requests[PATHS][METHODS][CLASSES];
static unsigned long long buckets[PATHS][BUCKETS], count[PATHS];
static double sum[PATHS];
static unsigned long long cut[CUTS];

static size_t path_index(const char *url)
{
        const char *p = url[0] == '/' ? url + 1 : url;
        size_t len = strcspn(p, "/?");
        for (size_t i = 0; i < OTHER; i++) {
                if (strlen(paths[i]) == len && strncmp(paths[i], p, len) == 0)
                        return i;
        }
        return OTHER;
}

static size_t method_index(const char *method)
{
        for (size_t i = 0; i < METHODS - 1; i++) {
                if (strcmp(methods[i], method) == 0)
                        return i;
        }
        return METHODS - 1;
}

void http_counters_request(const char *method, const char *url, unsigned status, double seconds)
{
        size_t p = path_index(url), m = method_index(method), c = status / 100 < CLASSES ? status / 100 : 0;
        pthread_mutex_lock(&lock);
        requests[p][m][c]++;
        for (size_t b = 0; b < BUCKETS; b++) {
                if (seconds <= bucket_le[b]) {
                        buckets[p][b]++;
                        break;
                }
        }
        count[p]++;
        sum[p] += seconds;
        pthread_mutex_unlock(&lock);
}

void http_counters_cut(const char *why)
{
        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < CUTS; i++) {
                if (strcmp(cuts[i], why) == 0)
                        cut[i]++;
        }
        pthread_mutex_unlock(&lock);
}

static const char *path_label(size_t p)
{
        return paths[p][0] == '\0' ? "/" : paths[p];
}

void http_counters_write(FILE *out)
{
        pthread_mutex_lock(&lock);
        fputs("# HELP nsbox_http_requests_total HTTP requests answered, by first path segment, method and "
              "status class (0: the connection ended unanswered)\n# TYPE nsbox_http_requests_total counter\n",
              out);
        for (size_t p = 0; p < PATHS; p++)
                for (size_t m = 0; m < METHODS; m++)
                        for (size_t c = 0; c < CLASSES; c++)
                                if (requests[p][m][c] > 0)
                                        fprintf(out,
                                                "nsbox_http_requests_total{path=\"%s\",method=\"%s\",status="
                                                "\"%s\"} "
                                                "%llu\n",
                                                path_label(p), methods[m],
                                                (const char *[]){ "0", "1xx", "2xx", "3xx", "4xx", "5xx" }[c],
                                                requests[p][m][c]);
        fputs("# HELP nsbox_http_request_duration_seconds From a request's headers to its end\n"
              "# TYPE nsbox_http_request_duration_seconds histogram\n",
              out);
        for (size_t p = 0; p < PATHS; p++) {
                if (count[p] == 0)
                        continue;
                unsigned long long cumulative = 0;
                for (size_t b = 0; b < BUCKETS; b++) {
                        cumulative += buckets[p][b];
                        fprintf(out,
                                "nsbox_http_request_duration_seconds_bucket{path=\"%s\",le=\"%g\"} %llu\n",
                                path_label(p), bucket_le[b], cumulative);
                }
                fprintf(out,
                        "nsbox_http_request_duration_seconds_bucket{path=\"%s\",le=\"+Inf\"} %llu\n"
                        "nsbox_http_request_duration_seconds_sum{path=\"%s\"} %.6f\n"
                        "nsbox_http_request_duration_seconds_count{path=\"%s\"} %llu\n",
                        path_label(p), count[p], path_label(p), sum[p], path_label(p), count[p]);
        }
        fputs("# HELP nsbox_http_connections_cut_total Connections its bounds refused or closed, by bound\n"
              "# TYPE nsbox_http_connections_cut_total counter\n",
              out);
        for (size_t i = 0; i < CUTS; i++)
                fprintf(out, "nsbox_http_connections_cut_total{bound=\"%s\"} %llu\n", cuts[i], cut[i]);
        pthread_mutex_unlock(&lock);
}
