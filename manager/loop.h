/* SPDX-License-Identifier: Apache-2.0 */
/* The single-threaded epoll loop every part of nsboxd hangs off, and the
 * one place that keeps time: timers live on it, as redis ae's time events. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct loop;
struct loop_source;
struct loop_timer;

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

/* --- timers -----------------------------------------------------------------
 *
 * Timers are owned by the loop, kept in a min-heap and served by one timerfd
 * armed for the earliest; add, move and cancel cost O(log n). Times are on
 * CLOCK_MONOTONIC: ms as now_monotonic_ms() (daemon.h) reads them, or ns,
 * for what needs less than a ms (a pause's first look after 100 us, the
 * systemd watchdog's half period in us).
 *
 * Due timers fire in order of time, then of adding. A one-shot timer is
 * released once its callback returns unless the callback moved it, so a
 * callback forgets its pointer to it first. A timer added or moved by a
 * callback fires in a later batch, never in the one running. */
typedef void (*loop_timer_fn)(struct loop *loop, struct loop_timer *timer, void *data);

#define LOOP_NS_PER_MS 1000000LL

/* CLOCK_MONOTONIC in ns. */
long long loop_now_ns(void);

/* Fire cb once now_monotonic_ms() reaches at_ms. NULL when out of memory. */
struct loop_timer *loop_timer_add(struct loop *loop, long long at_ms, loop_timer_fn cb, void *data);
/* Fire cb delay_ms from now, to the ns, as a relative timerfd would. */
struct loop_timer *loop_timer_add_in(struct loop *loop, long long delay_ms, loop_timer_fn cb, void *data);
/* Fire cb at at_ns (loop_now_ns()) and, if every_ns > 0, every every_ns
 * after it until cancelled; late expiries are coalesced, as a timerfd's are. */
struct loop_timer *loop_timer_add_ns(struct loop *loop, long long at_ns, long long every_ns, loop_timer_fn cb,
                                     void *data);
/* Fire it at another time instead; from its own callback, this rearms it. */
void loop_timer_move(struct loop *loop, struct loop_timer *timer, long long at_ms);
void loop_timer_move_in(struct loop *loop, struct loop_timer *timer, long long delay_ms);
/* Never fire it again. Safe from any callback, its own included, and for a
 * timer due in the batch being fired. NULL is ignored. */
void loop_timer_cancel(struct loop *loop, struct loop_timer *timer);
