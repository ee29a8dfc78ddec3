/* SPDX-License-Identifier: Apache-2.0 */
/* The single-threaded epoll loop: sources, their callbacks, removal while
 * dispatching, and the timers of every module on one timerfd. */
#include "loop.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define LOOP_BATCH 256

#define NS_PER_S       1000000000LL
#define TIMER_UNQUEUED ((size_t)-1)

struct loop_timer {
        long long at_ns;    /* CLOCK_MONOTONIC */
        long long every_ns; /* 0: one-shot */
        uint64_t seq;       /* ties in at_ns fire in order of adding; see timers_fire */
        loop_timer_fn callback;
        void *data;
        size_t index;   /* in the heap, or TIMER_UNQUEUED */
        bool firing;    /* its callback runs: freed after it, not by cancel */
        bool cancelled; /* while firing */
};

struct loop {
        int epfd;
        struct loop_source *dead;
        struct loop_source *live; /* every source not yet removed, for loop_free */

        struct loop_timer **timers; /* a binary min-heap by (at_ns, seq) */
        size_t n_timers, timers_cap;
        size_t n_alive; /* queued or firing: the heap has room for all, so a move cannot fail */
        uint64_t timer_seq;
        int timer_fd;
        long long armed_ns; /* when timer_fd expires; 0: not armed */
        bool firing_timers; /* arm once the batch is done, not on each add */
};

static void on_timer_fd(struct loop_source *source, uint32_t events);

struct loop *loop_new(void)
{
        struct loop *loop = calloc(1, sizeof(*loop));
        if (loop == NULL)
                return NULL;
        loop->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (loop->epfd < 0) {
                free(loop);
                return NULL;
        }
        loop->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (loop->timer_fd < 0 || loop_add(loop, loop->timer_fd, EPOLLIN, on_timer_fd, loop) == NULL) {
                int saved = errno;
                if (loop->timer_fd >= 0)
                        close(loop->timer_fd);
                close(loop->epfd);
                free(loop);
                errno = saved;
                return NULL;
        }
        return loop;
}

static void loop_release_dead(struct loop *loop)
{
        while (loop->dead != NULL) {
                struct loop_source *s = loop->dead;
                loop->dead = s->next_dead;
                free(s);
        }
}

void loop_free(struct loop *loop)
{
        if (loop == NULL)
                return;
        while (loop->live != NULL)
                loop_remove(loop, loop->live); /* timer_fd too */
        loop_release_dead(loop);
        for (size_t i = 0; i < loop->n_timers; i++)
                free(loop->timers[i]);
        free(loop->timers);
        close(loop->epfd);
        free(loop);
}

struct loop_source *loop_add(struct loop *loop, int fd, uint32_t events, loop_callback cb, void *data)
{
        struct loop_source *s = calloc(1, sizeof(*s));
        if (s == NULL)
                return NULL;
        s->fd = fd;
        s->callback = cb;
        s->data = data;
        struct epoll_event ev = { .events = events, .data.ptr = s };
        if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                int saved = errno;
                free(s);
                errno = saved;
                return NULL;
        }
        s->next_live = loop->live;
        if (loop->live != NULL)
                loop->live->prev_live = s;
        loop->live = s;
        return s;
}

int loop_modify(struct loop *loop, struct loop_source *source, uint32_t events)
{
        struct epoll_event ev = { .events = events, .data.ptr = source };
        return epoll_ctl(loop->epfd, EPOLL_CTL_MOD, source->fd, &ev) < 0 ? -errno : 0;
}

void loop_remove(struct loop *loop, struct loop_source *source)
{
        int fd = loop_take(loop, source);
        if (fd >= 0)
                close(fd);
}

int loop_take(struct loop *loop, struct loop_source *source)
{
        if (source == NULL || source->dead)
                return -1;
        if (source->prev_live != NULL)
                source->prev_live->next_live = source->next_live;
        else
                loop->live = source->next_live;
        if (source->next_live != NULL)
                source->next_live->prev_live = source->prev_live;
        epoll_ctl(loop->epfd, EPOLL_CTL_DEL, source->fd, NULL);
        int fd = source->fd;
        source->fd = -1;
        source->dead = true;
        source->next_dead = loop->dead;
        loop->dead = source;
        return fd;
}

int loop_run_once(struct loop *loop, int timeout_ms)
{
        struct epoll_event events[LOOP_BATCH];
        int n = epoll_wait(loop->epfd, events, LOOP_BATCH, timeout_ms);
        if (n < 0)
                return errno == EINTR ? 0 : -errno;
        for (int i = 0; i < n; i++) {
                struct loop_source *s = events[i].data.ptr;
                if (!s->dead)
                        s->callback(s, events[i].events);
        }
        loop_release_dead(loop);
        return n;
}

/* --- timers ---------------------------------------------------------------- */

long long loop_now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static long long ms_to_ns(long long ms)
{
        if (ms > LLONG_MAX / LOOP_NS_PER_MS)
                return LLONG_MAX;
        return ms < 0 ? 0 : ms * LOOP_NS_PER_MS;
}

static long long ns_after(long long at_ns, long long delay_ns)
{
        return delay_ns > LLONG_MAX - at_ns ? LLONG_MAX : at_ns + delay_ns;
}

static bool timer_before(const struct loop_timer *a, const struct loop_timer *b)
{
        return a->at_ns < b->at_ns || (a->at_ns == b->at_ns && a->seq < b->seq);
}

static void heap_set(struct loop *loop, size_t i, struct loop_timer *t)
{
        loop->timers[i] = t;
        t->index = i;
}

static void heap_up(struct loop *loop, size_t i)
{
        struct loop_timer *t = loop->timers[i];
        while (i > 0) {
                size_t parent = (i - 1) / 2;
                if (!timer_before(t, loop->timers[parent]))
                        break;
                heap_set(loop, i, loop->timers[parent]);
                i = parent;
        }
        heap_set(loop, i, t);
}

static void heap_down(struct loop *loop, size_t i)
{
        struct loop_timer *t = loop->timers[i];
        for (;;) {
                size_t child = 2 * i + 1;
                if (child >= loop->n_timers)
                        break;
                if (child + 1 < loop->n_timers && timer_before(loop->timers[child + 1], loop->timers[child]))
                        child++;
                if (!timer_before(loop->timers[child], t))
                        break;
                heap_set(loop, i, loop->timers[child]);
                i = child;
        }
        heap_set(loop, i, t);
}

static void heap_push(struct loop *loop, struct loop_timer *t)
{
        t->seq = loop->timer_seq++;
        heap_set(loop, loop->n_timers++, t);
        heap_up(loop, t->index);
}

static void timer_free(struct loop *loop, struct loop_timer *t)
{
        loop->n_alive--;
        free(t);
}

static void heap_remove(struct loop *loop, struct loop_timer *t)
{
        size_t i = t->index;
        struct loop_timer *last = loop->timers[--loop->n_timers];
        t->index = TIMER_UNQUEUED;
        if (last == t)
                return;
        heap_set(loop, i, last);
        if (i > 0 && timer_before(last, loop->timers[(i - 1) / 2]))
                heap_up(loop, i);
        else
                heap_down(loop, i);
}

/* Arm timer_fd for the earliest timer if it would expire later than that.
 * A cancelled or moved earliest leaves it armed early: it then expires for
 * nothing once, which costs less than a syscall on every cancel. */
static void timers_arm(struct loop *loop)
{
        if (loop->firing_timers || loop->n_timers == 0)
                return;
        long long at = loop->timers[0]->at_ns;
        if (loop->armed_ns != 0 && loop->armed_ns <= at)
                return;
        struct itimerspec its = { .it_value = { .tv_sec = at / NS_PER_S, .tv_nsec = at % NS_PER_S } };
        if (timerfd_settime(loop->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
                loop->armed_ns = at;
}

/* Fire the timers due now, earliest first, one at a time: a callback may
 * cancel, move or add others. The ones a callback adds or moves wait for a
 * later batch (their seq is past `until`), so a callback that adds a timer
 * due at once cannot keep the loop here. */
static void timers_fire(struct loop *loop)
{
        long long now = loop_now_ns();
        uint64_t until = loop->timer_seq;
        loop->firing_timers = true;
        while (loop->n_timers > 0) {
                struct loop_timer *t = loop->timers[0];
                if (t->at_ns > now || t->seq >= until)
                        break;
                heap_remove(loop, t);
                t->firing = true;
                t->callback(loop, t, t->data);
                t->firing = false;
                if (t->cancelled || (t->index == TIMER_UNQUEUED && t->every_ns == 0)) {
                        timer_free(loop, t);
                } else if (t->index == TIMER_UNQUEUED) {
                        /* The next expiry after now on its grid, as a timerfd's interval. */
                        t->at_ns = ns_after(t->at_ns, t->every_ns);
                        if (t->at_ns <= now)
                                t->at_ns =
                                    ns_after(t->at_ns, ((now - t->at_ns) / t->every_ns + 1) * t->every_ns);
                        heap_push(loop, t);
                }
        }
        loop->firing_timers = false;
        timers_arm(loop);
}

static void on_timer_fd(struct loop_source *source, uint32_t events)
{
        struct loop *loop = source->data;
        uint64_t expirations;
        /* Nothing to read when it was armed again since it expired: the heap,
         * not the count, says what is due. */
        (void)!read(source->fd, &expirations, sizeof(expirations));
        loop->armed_ns = 0;
        timers_fire(loop);
}

struct loop_timer *loop_timer_add_ns(struct loop *loop, long long at_ns, long long every_ns, loop_timer_fn cb,
                                     void *data)
{
        if (loop->n_alive == loop->timers_cap) {
                size_t cap = loop->timers_cap ? loop->timers_cap * 2 : 64;
                struct loop_timer **timers = realloc(loop->timers, cap * sizeof(*timers));
                if (timers == NULL)
                        return NULL;
                loop->timers = timers;
                loop->timers_cap = cap;
        }
        struct loop_timer *t = calloc(1, sizeof(*t));
        if (t == NULL)
                return NULL;
        loop->n_alive++;
        t->at_ns = at_ns > 0 ? at_ns : 1; /* a zero it_value would disarm timer_fd */
        t->every_ns = every_ns > 0 ? every_ns : 0;
        t->callback = cb;
        t->data = data;
        t->index = TIMER_UNQUEUED;
        heap_push(loop, t);
        timers_arm(loop);
        return t;
}

struct loop_timer *loop_timer_add(struct loop *loop, long long at_ms, loop_timer_fn cb, void *data)
{
        return loop_timer_add_ns(loop, ms_to_ns(at_ms), 0, cb, data);
}

struct loop_timer *loop_timer_add_in(struct loop *loop, long long delay_ms, loop_timer_fn cb, void *data)
{
        return loop_timer_add_ns(loop, ns_after(loop_now_ns(), ms_to_ns(delay_ms)), 0, cb, data);
}

static void timer_move_ns(struct loop *loop, struct loop_timer *t, long long at_ns)
{
        if (t == NULL || t->cancelled)
                return;
        if (t->index != TIMER_UNQUEUED)
                heap_remove(loop, t);
        t->at_ns = at_ns > 0 ? at_ns : 1;
        heap_push(loop, t); /* a new seq: moved in a batch, it waits for the next */
        timers_arm(loop);
}

void loop_timer_move(struct loop *loop, struct loop_timer *timer, long long at_ms)
{
        timer_move_ns(loop, timer, ms_to_ns(at_ms));
}

void loop_timer_move_in(struct loop *loop, struct loop_timer *timer, long long delay_ms)
{
        timer_move_ns(loop, timer, ns_after(loop_now_ns(), ms_to_ns(delay_ms)));
}

void loop_timer_cancel(struct loop *loop, struct loop_timer *timer)
{
        if (timer == NULL)
                return;
        if (timer->index != TIMER_UNQUEUED)
                heap_remove(loop, timer);
        if (timer->firing)
                timer->cancelled = true;
        else
                timer_free(loop, timer);
}
