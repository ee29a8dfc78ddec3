/* SPDX-License-Identifier: Apache-2.0 */
/* The one instance of nsboxd's shared state, and the clocks every part reads. */
#include "daemon.h"

#include <stdio.h>
#include <time.h>

struct nsboxd nsboxd = { .init_memfd = -1 };

long long now_realtime_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long now_monotonic_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

long long now_monotonic_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void format_timestamp(long long realtime_ms, char *buf, size_t len)
{
        time_t secs = (time_t)(realtime_ms / 1000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        char base[32];
        strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf, len, "%s.%03lldZ", base, realtime_ms % 1000);
}

void format_duration(long long seconds, char *buf, size_t len)
{
        if (seconds < 0)
                seconds = 0;
        if (seconds < 120)
                snprintf(buf, len, "%lld s", seconds);
        else if (seconds < 2 * 3600)
                snprintf(buf, len, "%lld min", seconds / 60);
        else if (seconds < 2 * 86400)
                snprintf(buf, len, "%lld h", seconds / 3600);
        else
                snprintf(buf, len, "%lld d", seconds / 86400);
}
