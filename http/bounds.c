/* SPDX-License-Identifier: Apache-2.0 */
/* What a peer without a token can hold of nsbox-http.
 *
 * MHD's --timeout is an inactivity timeout: a client that sends one header
 * byte now and then keeps its connection (and, one thread per connection,
 * its thread) for ever, and enough of them fill --max-connections, after
 * which MHD stops accepting and no token holder is served. So:
 *
 *  - a deadline: a request's headers, with a valid token, must have arrived
 *    --header-timeout after the connection's accept or after the end of the
 *    previous request with a valid token on it; a watchdog thread shuts down
 *    the connections past it (MHD's thread then sees the end and closes);
 *  - at most --max-per-address connections from one client address, more are
 *    refused at accept;
 *  - connections that have not yet passed the token check take at most
 *    --max-connections minus --auth-reserve. One more does not wait for a
 *    slot: the oldest of them is shut down to make room. Refusing it instead
 *    would refuse a token holder's new connection too (nothing tells them
 *    apart at accept), for as long as a peer that reconnects at once keeps
 *    the unauthenticated share full; evicting makes holding connections
 *    worth nothing, and a token holder, who sends its headers at once, is
 *    served unless a whole share of new connections arrives before its
 *    headers do. The reserve keeps MHD's own limit out of reach of
 *    unauthenticated connections, so accept (where eviction happens) never
 *    stops for them.
 *
 * The watchdog shuts a connection's fd down under bounds_lock, and the
 * connection leaves the list under bounds_lock in MHD_CONNECTION_NOTIFY_CLOSED,
 * which MHD runs before it closes the fd (MHD_cleanup_connections in
 * libmicrohttpd 0.9.75's daemon.c; the thread of a connection only shuts its
 * socket down): an fd is never shut down once MHD has closed it and the
 * number may be another file's. The accept policy and
 * MHD_CONNECTION_NOTIFY_STARTED run one after the other in MHD's listening
 * thread, so the counts the policy reads include every connection it let in. */
#include "bounds.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "counters.h"

/* A client address: IPv4 (an IPv4-mapped IPv6 address counts as its IPv4
 * one), IPv6, or none (not an IP socket). */
struct peer_address {
        sa_family_t family;
        unsigned char bytes[16];
};

struct bounded_connection {
        struct bounded_connection *prev, *next;
        int fd;
        struct peer_address address;
        uint64_t deadline_ms;       /* CLOCK_MONOTONIC; 0: none (a request with a valid token runs) */
        bool authenticated;         /* a request on it passed the token check */
        bool request_authenticated; /* the request in progress did */
        bool cut;                   /* shut down here; MHD closes it */
        bool upgraded;              /* a WebSocket now: held, no deadline, until it closes */
};

/* A kind of cut-off, logged at most once a second with the count since its last line. */
struct bounds_log {
        const char *what;
        const char *counter; /* its name in nsbox_http_connections_cut_total */
        uint64_t last_ms;
        unsigned unlogged;
};

static pthread_mutex_t bounds_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bounds_wake;
static pthread_t watchdog;
static bool watchdog_running, stopping;
static struct bounded_connection *connections;
static unsigned unauthenticated; /* in connections, neither authenticated nor cut */
static struct http_bounds bounds;

static struct bounds_log log_deadline = { .counter = "header_timeout",
                                          .what = "closed, no request with a valid token within "
                                                  "--header-timeout" };
static struct bounds_log log_per_address = { .counter = "per_address",
                                             .what = "refused, the address holds --max-per-address "
                                                     "connections" };
static struct bounds_log log_evicted = { .counter = "evicted",
                                         .what = "closed to admit a new one, unauthenticated connections "
                                                 "are at --max-connections less --auth-reserve" };
static struct bounds_log log_full = { .counter = "full",
                                      .what = "refused, connections are at --max-connections" };

static uint64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void peer_address_of(const struct sockaddr *sa, struct peer_address *out)
{
        memset(out, 0, sizeof(*out));
        if (sa == NULL)
                return;
        if (sa->sa_family == AF_INET) {
                out->family = AF_INET;
                memcpy(out->bytes, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        } else if (sa->sa_family == AF_INET6) {
                const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
                if (IN6_IS_ADDR_V4MAPPED(a)) {
                        out->family = AF_INET;
                        memcpy(out->bytes, &a->s6_addr[12], 4);
                } else {
                        /* A /64 is one client: its holder has all of its
                         * 2^64 addresses to connect from. */
                        out->family = AF_INET6;
                        memcpy(out->bytes, a->s6_addr, 8);
                }
        }
}

static bool peer_address_equal(const struct peer_address *a, const struct peer_address *b)
{
        return a->family == b->family && memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

static const char *peer_address_text(const struct peer_address *a, char *buf, size_t len)
{
        if (a->family == 0 || inet_ntop(a->family, a->bytes, buf, len) == NULL)
                snprintf(buf, len, "a peer");
        return buf;
}

/* Under bounds_lock. */
/* A cut-off is decided under bounds_lock, and its line written after that
 * lock is let go: a stderr that does not drain (a stalled journal) must not
 * hold every connection's thread. At most BOUNDS_PENDING wait; the rest
 * count as unlogged, as lines within the second do. */
#define BOUNDS_PENDING 8
static struct {
        struct bounds_log *log;
        char address[INET6_ADDRSTRLEN];
        char limit[64];
        unsigned unlogged;
} pending[BOUNDS_PENDING];
static unsigned n_pending;

/* Under bounds_lock. */
static void bounds_note(struct bounds_log *l, const struct peer_address *address, const char *limit)
{
        uint64_t now = now_ms();
        http_counters_cut(l->counter);
        if ((l->last_ms != 0 && now - l->last_ms < 1000) || n_pending == BOUNDS_PENDING) {
                l->unlogged++;
                return;
        }
        peer_address_text(address, pending[n_pending].address, sizeof(pending[n_pending].address));
        snprintf(pending[n_pending].limit, sizeof(pending[n_pending].limit), "%s", limit);
        pending[n_pending].log = l;
        pending[n_pending].unlogged = l->unlogged;
        n_pending++;
        l->last_ms = now;
        l->unlogged = 0;
}

/* Not under bounds_lock: write what bounds_note kept. */
static void bounds_flush(void)
{
        pthread_mutex_lock(&bounds_lock);
        unsigned n = n_pending;
        __typeof__(pending) lines;
        memcpy(lines, pending, sizeof(lines));
        n_pending = 0;
        pthread_mutex_unlock(&bounds_lock);
        for (unsigned i = 0; i < n; i++) {
                fprintf(stderr, "nsbox-http: a connection of %s %s (%s)", lines[i].address,
                        lines[i].log->what, lines[i].limit);
                if (lines[i].unlogged > 0)
                        fprintf(stderr, "; %u more since the last such line", lines[i].unlogged);
                fputc('\n', stderr);
        }
}

/* Under bounds_lock: the connection stays listed until MHD's CLOSED. */
static void bounds_cut(struct bounded_connection *c)
{
        shutdown(c->fd, SHUT_RDWR);
        c->cut = true;
        c->deadline_ms = 0;
        if (!c->authenticated)
                unauthenticated--;
}

static void *watchdog_main(void *arg)
{
        (void)arg;
        char limit[64];
        snprintf(limit, sizeof(limit), "%u s", bounds.header_timeout_seconds);
        pthread_mutex_lock(&bounds_lock);
        while (!stopping) {
                uint64_t now = now_ms();
                /* Every deadline armed later is at least a whole
                 * --header-timeout away: none can fall before this. */
                uint64_t next = now + (uint64_t)bounds.header_timeout_seconds * 1000;
                for (struct bounded_connection *c = connections; c != NULL; c = c->next) {
                        if (c->cut || c->deadline_ms == 0)
                                continue;
                        if (c->deadline_ms <= now) {
                                bounds_cut(c);
                                bounds_note(&log_deadline, &c->address, limit);
                        } else if (c->deadline_ms < next) {
                                next = c->deadline_ms;
                        }
                }
                if (n_pending > 0) {
                        pthread_mutex_unlock(&bounds_lock);
                        bounds_flush();
                        pthread_mutex_lock(&bounds_lock);
                        continue; /* the list may have changed meanwhile */
                }
                struct timespec until = { .tv_sec = next / 1000, .tv_nsec = (next % 1000) * 1000000 };
                pthread_cond_timedwait(&bounds_wake, &bounds_lock, &until);
        }
        pthread_mutex_unlock(&bounds_lock);
        return NULL;
}

int http_bounds_start(const struct http_bounds *config, nsbox_error_t **err)
{
        bounds = *config;
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        int r = pthread_cond_init(&bounds_wake, &attr);
        pthread_condattr_destroy(&attr);
        if (r != 0)
                return nsbox_error(err, r, "pthread_cond_init");
        r = pthread_create(&watchdog, NULL, watchdog_main, NULL);
        if (r != 0)
                return nsbox_error(err, r, "start the header deadline's thread");
        watchdog_running = true;
        return 0;
}

void http_bounds_stop(void)
{
        if (!watchdog_running)
                return;
        pthread_mutex_lock(&bounds_lock);
        stopping = true;
        pthread_cond_signal(&bounds_wake);
        pthread_mutex_unlock(&bounds_lock);
        pthread_join(watchdog, NULL);
        watchdog_running = false;
}

enum MHD_Result http_bounds_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
        (void)cls;
        (void)addrlen;
        struct peer_address address;
        peer_address_of(addr, &address);
        char limit[64];
        pthread_mutex_lock(&bounds_lock);
        unsigned same = 0, live = 0;
        for (struct bounded_connection *c = connections; c != NULL; c = c->next) {
                same += peer_address_equal(&c->address, &address);
                live += !c->cut;
        }
        if (address.family != 0 && same >= bounds.max_per_address) {
                snprintf(limit, sizeof(limit), "%u", bounds.max_per_address);
                bounds_note(&log_per_address, &address, limit);
                pthread_mutex_unlock(&bounds_lock);
                bounds_flush();
                return MHD_NO;
        }
        if (unauthenticated >= bounds.max_unauthenticated) {
                struct bounded_connection *oldest = NULL;
                for (struct bounded_connection *c = connections; c != NULL; c = c->next)
                        if (!c->cut && !c->authenticated &&
                            (oldest == NULL || c->deadline_ms < oldest->deadline_ms))
                                oldest = c;
                if (oldest != NULL) {
                        bounds_cut(oldest);
                        snprintf(limit, sizeof(limit), "%u", bounds.max_unauthenticated);
                        bounds_note(&log_evicted, &oldest->address, limit);
                        live--;
                }
        }
        /* Connections cut here but not yet closed by MHD are not counted:
         * MHD's own limit is higher by HTTP_BOUNDS_DYING for them. */
        if (live >= bounds.max_connections) {
                snprintf(limit, sizeof(limit), "%u", bounds.max_connections);
                bounds_note(&log_full, &address, limit);
                pthread_mutex_unlock(&bounds_lock);
                bounds_flush();
                return MHD_NO;
        }
        bool noted = n_pending > 0; /* an eviction's line */
        pthread_mutex_unlock(&bounds_lock);
        if (noted)
                bounds_flush();
        return MHD_YES;
}

static struct bounded_connection *connection_of(struct MHD_Connection *connection)
{
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        return info ? info->socket_context : NULL;
}

void http_bounds_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                        enum MHD_ConnectionNotificationCode code)
{
        (void)cls;
        if (code == MHD_CONNECTION_NOTIFY_STARTED) {
                const union MHD_ConnectionInfo *fd_info =
                    MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
                const union MHD_ConnectionInfo *addr_info =
                    MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
                struct bounded_connection *c = calloc(1, sizeof(*c));
                if (c == NULL || fd_info == NULL) {
                        /* Not bounded, so not served: its fd is MHD's and open here. */
                        if (fd_info != NULL)
                                shutdown(fd_info->connect_fd, SHUT_RDWR);
                        free(c);
                        *socket_context = NULL;
                        return;
                }
                c->fd = fd_info->connect_fd;
                peer_address_of(addr_info ? addr_info->client_addr : NULL, &c->address);
                c->deadline_ms = now_ms() + (uint64_t)bounds.header_timeout_seconds * 1000;
                pthread_mutex_lock(&bounds_lock);
                c->next = connections;
                if (connections != NULL)
                        connections->prev = c;
                connections = c;
                unauthenticated++;
                pthread_mutex_unlock(&bounds_lock);
                *socket_context = c;
                return;
        }
        struct bounded_connection *c = *socket_context;
        if (c == NULL)
                return;
        pthread_mutex_lock(&bounds_lock);
        if (c->prev != NULL)
                c->prev->next = c->next;
        else
                connections = c->next;
        if (c->next != NULL)
                c->next->prev = c->prev;
        if (!c->cut && !c->authenticated)
                unauthenticated--;
        pthread_mutex_unlock(&bounds_lock);
        free(c);
        *socket_context = NULL;
}

bool http_bounds_authenticated(struct MHD_Connection *connection)
{
        struct bounded_connection *c = connection_of(connection);
        if (c == NULL)
                return true;
        pthread_mutex_lock(&bounds_lock);
        bool cut = c->cut;
        if (!cut) {
                c->deadline_ms = 0;
                c->request_authenticated = true;
                if (!c->authenticated)
                        unauthenticated--;
                c->authenticated = true;
        }
        pthread_mutex_unlock(&bounds_lock);
        return !cut;
}

void http_bounds_upgraded(struct MHD_Connection *connection)
{
        struct bounded_connection *c = connection_of(connection);
        if (c == NULL)
                return;
        pthread_mutex_lock(&bounds_lock);
        c->upgraded = true;
        pthread_mutex_unlock(&bounds_lock);
}

void http_bounds_request_done(struct MHD_Connection *connection)
{
        struct bounded_connection *c = connection_of(connection);
        if (c == NULL)
                return;
        pthread_mutex_lock(&bounds_lock);
        /* A request without a valid token leaves the deadline running: a
         * peer cannot keep a connection by sending requests that get 401. */
        if (!c->cut && c->request_authenticated && !c->upgraded)
                c->deadline_ms = now_ms() + (uint64_t)bounds.header_timeout_seconds * 1000;
        c->request_authenticated = false;
        pthread_mutex_unlock(&bounds_lock);
}

/* MHD's messages, one line per message a second at most: a peer whose
 * connections are cut makes one ("closed ... with incomplete request") each. */
void http_bounds_mhd_log(void *cls, const char *fmt, va_list ap)
{
        (void)cls;
        static struct {
                const char *fmt;
                uint64_t last_ms;
                unsigned unlogged;
        } seen[32];
        static unsigned next_slot;
        uint64_t now = now_ms();
        pthread_mutex_lock(&bounds_lock);
        unsigned i = 0;
        while (i < 32 && seen[i].fmt != fmt)
                i++;
        if (i == 32) {
                i = next_slot++ % 32;
                seen[i].fmt = fmt;
                seen[i].last_ms = 0;
                seen[i].unlogged = 0;
        } else if (now - seen[i].last_ms < 1000) {
                seen[i].unlogged++;
                pthread_mutex_unlock(&bounds_lock);
                return;
        }
        unsigned unlogged = seen[i].unlogged;
        seen[i].last_ms = now;
        seen[i].unlogged = 0;
        pthread_mutex_unlock(&bounds_lock);
        char line[512];
        vsnprintf(line, sizeof(line), fmt, ap);
        line[strcspn(line, "\n")] = '\0';
        if (unlogged > 0)
                fprintf(stderr, "nsbox-http: %s (and %u more like it since the last)\n", line, unlogged);
        else
                fprintf(stderr, "nsbox-http: %s\n", line);
}

/* Requests in flight per owner, for --max-per-token: a short list (one entry
 * per owner with a request now), shared by every connection's thread. */
struct owner_load {
        uid_t uid;
        unsigned requests;
};
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static struct owner_load *loads;
static size_t n_loads, loads_cap;

bool http_bounds_owner_take(uid_t uid, unsigned max)
{
        pthread_mutex_lock(&load_lock);
        struct owner_load *l = NULL;
        for (size_t i = 0; i < n_loads && l == NULL; i++)
                if (loads[i].uid == uid)
                        l = &loads[i];
        if (l == NULL && n_loads == loads_cap) {
                size_t cap = loads_cap ? 2 * loads_cap : 16;
                struct owner_load *more = reallocarray(loads, cap, sizeof(*loads));
                if (more != NULL) {
                        loads = more;
                        loads_cap = cap;
                }
        }
        if (l == NULL && n_loads < loads_cap) {
                l = &loads[n_loads++];
                *l = (struct owner_load){ .uid = uid };
        }
        bool ok = l != NULL && l->requests < max;
        if (ok)
                l->requests++;
        pthread_mutex_unlock(&load_lock);
        return ok;
}

void http_bounds_owner_give(uid_t uid)
{
        pthread_mutex_lock(&load_lock);
        for (size_t i = 0; i < n_loads; i++) {
                if (loads[i].uid != uid)
                        continue;
                if (--loads[i].requests == 0)
                        loads[i] = loads[--n_loads];
                break;
        }
        pthread_mutex_unlock(&load_lock);
}
