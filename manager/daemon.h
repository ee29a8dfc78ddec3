/* SPDX-License-Identifier: Apache-2.0 */
/* State shared by the parts of nsboxd. One instance, owned by main(). */
#pragma once

#include <stdbool.h>

#include "config.h"
#include "loop.h"

struct sandbox;

struct nsboxd {
        struct nsbox_config config;
        struct loop *loop;
        int init_memfd; /* sealed copy of nsbox-init, exec'd in every sandbox */
        struct sandbox *sandboxes;
        unsigned n_sandboxes; /* given to clients (pooled ones not counted) */
        unsigned n_pooled;
        unsigned char *uid_slots; /* one byte per range of the uid pool */
        bool stopping;
        long long last_request_mono; /* when a client's request last arrived */
        int argc;                    /* for reloading the configuration on SIGHUP */
        char **argv;
};

extern struct nsboxd nsboxd;

/* Parse argv, serve until SIGTERM/SIGINT, clean up. Returns the exit code. */
int nsboxd_main(int argc, char **argv);

/* Wall clock in ms and a monotonic clock in ms. */
long long now_realtime_ms(void);
long long now_monotonic_ms(void);
long long now_monotonic_ns(void);
/* RFC 3339 UTC with milliseconds, into buf (at least 32 bytes). */
void format_timestamp(long long realtime_ms, char *buf, size_t len);
/* A span for people: "45 s", "5 min", "3 h", "2 d" (whole units, down). */
void format_duration(long long seconds, char *buf, size_t len);
