/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-egress's core (core.h): the state every part shares and what
 * they call: the clock, epoll interest, events to nsboxd (queued while the
 * control socket is full), refusals and stats, the host's addresses, the
 * fd budget, listeners paused after a failed accept, the sandbox lookup. */
#include "core.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"

#define OUT_QUEUE_MAX 4096

struct egress egress;

struct out_msg {
        struct out_msg *next;
        size_t len;
        char data[];
};

int64_t egress_now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Interest 0 takes the fd out of epoll: a registered fd reports HUP and ERR
 * whatever it asked for, which would spin a connection that is waiting for
 * a resolver. */
void egress_watch(struct watch *w, uint32_t events)
{
        if (w->fd < 0 || w->events == events)
                return;
        struct epoll_event ev = { .events = events, .data.ptr = w };
        int op = events == 0 ? EPOLL_CTL_DEL : w->events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
        if (epoll_ctl(egress.epoll_fd, op, w->fd, &ev) < 0) {
                log_error("epoll_ctl fd %d: %s", w->fd, strerror(errno));
                return;
        }
        w->events = events;
}

void egress_unwatch(struct watch *w)
{
        egress_watch(w, 0);
}

/* --- events to nsboxd ----------------------------------------------------- */

void egress_control_flush(void)
{
        while (egress.out_head != NULL) {
                struct out_msg *m = egress.out_head;
                ssize_t n = send(egress.control.fd, m->data, m->len, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        log_error("control socket: %s", strerror(errno));
                        exit(1);
                }
                egress.out_head = m->next;
                if (egress.out_head == NULL)
                        egress.out_tail = &egress.out_head;
                egress.n_out--;
                free(m);
        }
        egress_watch(&egress.control, EPOLLIN | (egress.out_head ? EPOLLOUT : 0));
}

void egress_send_event(json_t *event)
{
        _cleanup_free_ char *text = json_dumps(event, JSON_COMPACT);
        json_decref(event);
        if (text == NULL)
                return;
        if (egress.n_out >= OUT_QUEUE_MAX) {
                log_limited("egress control", LOG_LEVEL_WARN, "nsboxd reads no events: dropping one");
                return;
        }
        size_t len = strlen(text);
        struct out_msg *m = malloc(sizeof(*m) + len);
        if (m == NULL)
                return;
        m->next = NULL;
        m->len = len;
        memcpy(m->data, text, len);
        *egress.out_tail = m;
        egress.out_tail = &m->next;
        egress.n_out++;
        egress_control_flush();
}

static void refused_event(struct egress_sandbox *sb, const char *name, uint32_t addr, uint16_t port,
                          const char *reason, bool lookup)
{
        sb->delta.refused++;
        if (sb->refused_tokens < 1)
                return;
        sb->refused_tokens -= 1;
        char a[INET_ADDRSTRLEN] = "";
        if (addr != 0) {
                struct in_addr in = { .s_addr = htonl(addr) };
                inet_ntop(AF_INET, &in, a, sizeof(a));
        }
        json_t *event =
            json_pack("{s:s, s:s, s:s?, s:s?, s:i, s:s}", "event", "refused", "sandbox", sb->id, "name", name,
                      "address", addr ? a : NULL, "port", (json_int_t)port, "reason", reason);
        if (event != NULL && lookup)
                json_object_set_new(event, "lookup", json_true());
        egress_send_event(event);
}

void egress_refused(struct egress_sandbox *sb, const char *name, uint32_t addr, uint16_t port,
                    const char *reason)
{
        refused_event(sb, name, addr, port, reason, false);
}

void egress_refused_lookup(struct egress_sandbox *sb, const char *name, const char *reason)
{
        refused_event(sb, name, 0, 53, reason, true);
}

void egress_send_stats(void)
{
        for (struct egress_sandbox *sb = egress.sandboxes; sb != NULL; sb = sb->next) {
                if (sb->refused_tokens < EGRESS_REFUSED_BURST)
                        sb->refused_tokens += 1;
                struct egress_counts *d = &sb->delta;
                if (sb->secrets != NULL) { /* what its interception threads counted */
                        d->secrets_injected +=
                            __atomic_exchange_n(&sb->secrets->injected, 0, __ATOMIC_RELAXED);
                        d->refused += __atomic_exchange_n(&sb->secrets->refused, 0, __ATOMIC_RELAXED);
                }
                if ((d->bytes_in | d->bytes_out | d->connections | d->refused | d->dns_queries |
                     d->secrets_injected) == 0)
                        continue;
                json_t *event = egress_counts_json(d); /* NULL-safe to the end */
                json_object_set_new(event, "event", json_string("stats"));
                json_object_set_new(event, "sandbox", json_string(sb->id));
                egress_send_event(event);
                sb->sent.bytes_in += d->bytes_in;
                sb->sent.bytes_out += d->bytes_out;
                sb->sent.connections += d->connections;
                sb->sent.refused += d->refused;
                sb->sent.dns_queries += d->dns_queries;
                sb->sent.secrets_injected += d->secrets_injected;
                *d = (struct egress_counts){ 0 };
        }
}

json_t *egress_counts_json(const struct egress_counts *counts)
{
        return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "bytes_in", (json_int_t)counts->bytes_in,
                         "bytes_out", (json_int_t)counts->bytes_out, "connections",
                         (json_int_t)counts->connections, "refused", (json_int_t)counts->refused,
                         "dns_queries", (json_int_t)counts->dns_queries, "secrets_injected",
                         (json_int_t)counts->secrets_injected);
}

/* The host's own addresses are special: a sandbox must not reach the
 * host's services on them. Interfaces come and go: refreshed. */
void egress_refresh_host_addrs(void)
{
        struct ifaddrs *ifa = NULL;
        if (getifaddrs(&ifa) < 0)
                return;
        size_t n = 0;
        for (struct ifaddrs *i = ifa; i != NULL && n < EGRESS_HOST_ADDRS_MAX; i = i->ifa_next)
                if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET)
                        egress.host_addrs[n++] = ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
        egress.n_host_addrs = n;
        freeifaddrs(ifa);
}

/* --- listeners and the fd budget ----------------------------------------------- */

unsigned egress_conn_limit(void)
{
        unsigned used = EGRESS_FD_RESERVE + egress.n_listener_fds;
        unsigned limit = egress.fd_limit > used ? (egress.fd_limit - used) / 2 : 0;
        return limit < EGRESS_CONN_MAX ? limit : EGRESS_CONN_MAX;
}

/* accept4 failed for a reason other than "nothing to accept": out of fds
 * (EMFILE, ENFILE), memory, or a listener nsboxd shut down. The listener
 * stays readable (level-triggered): left in epoll it would spin the loop
 * and flood the log, starving every other sandbox. Out of epoll for
 * EGRESS_ACCEPT_PAUSE_MS, re-armed by egress.resume. */
void egress_accept_failed(struct watch *listener, const char *who, int error)
{
        log_limited("egress accept", LOG_LEVEL_WARN, "%s: accept: %s (not accepting for %d ms)", who,
                    strerror(error), EGRESS_ACCEPT_PAUSE_MS);
        egress_unwatch(listener);
        listener->paused = true;
        struct itimerspec its = { .it_value = { 0, EGRESS_ACCEPT_PAUSE_MS * 1000000L } };
        struct itimerspec now;
        /* One timer for all: armed unless it already runs. */
        if (timerfd_gettime(egress.resume.fd, &now) == 0 && now.it_value.tv_sec == 0 &&
            now.it_value.tv_nsec == 0)
                timerfd_settime(egress.resume.fd, 0, &its, NULL);
}

static void resume_one(struct watch *w)
{
        if (w->paused && w->fd >= 0) {
                w->paused = false;
                egress_watch(w, EPOLLIN);
        }
}

void egress_resume_listeners(void)
{
        uint64_t ticks;
        (void)!read(egress.resume.fd, &ticks, sizeof(ticks));
        for (struct egress_sandbox *sb = egress.sandboxes; sb != NULL; sb = sb->next) {
                resume_one(&sb->tcp);
                for (struct expose *e = sb->exposes; e != NULL; e = e->next)
                        resume_one(&e->listener);
        }
}

/* --- sandboxes ------------------------------------------------------------ */

struct egress_sandbox *egress_sandbox_find(const char *id)
{
        for (struct egress_sandbox *sb = egress.sandboxes; sb != NULL; sb = sb->next)
                if (strcmp(sb->id, id) == 0)
                        return sb;
        return NULL;
}
