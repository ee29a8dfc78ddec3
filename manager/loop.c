/* SPDX-License-Identifier: Apache-2.0 */
/* The single-threaded epoll loop: sources, their callbacks, and removal while dispatching. */
#include "loop.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#define LOOP_BATCH 256

struct loop {
        int epfd;
        struct loop_source *dead;
        struct loop_source *live; /* every source not yet removed, for loop_free */
};

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
                loop_remove(loop, loop->live);
        loop_release_dead(loop);
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
