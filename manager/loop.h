/* SPDX-License-Identifier: Apache-2.0 */
/* The single-threaded epoll loop every part of nsboxd hangs off. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct loop;
struct loop_source;

typedef void (*loop_callback)(struct loop_source *source, uint32_t events);

struct loop_source {
        int fd;
        loop_callback callback;
        void *data;
        bool dead; /* removed during this iteration; freed after it */
        struct loop_source *next_dead;
        struct loop_source *prev_live, *next_live;
};

struct loop *loop_new(void);
void loop_free(struct loop *loop);

/* Watch fd; the source is owned by the loop until loop_remove(). */
struct loop_source *loop_add(struct loop *loop, int fd, uint32_t events, loop_callback cb, void *data);
int loop_modify(struct loop *loop, struct loop_source *source, uint32_t events);
/* Stop watching and close the fd; the memory is released after the current
 * batch of events, so pending events of this source are skipped safely. */
void loop_remove(struct loop *loop, struct loop_source *source);
/* Stop watching, like loop_remove, but hand the fd back open (or -1). */
int loop_take(struct loop *loop, struct loop_source *source);

/* Run one batch of events, waiting at most timeout_ms (-1: forever). */
int loop_run_once(struct loop *loop, int timeout_ms);
