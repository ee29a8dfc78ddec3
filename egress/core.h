/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-egress's core, below dns.c, proxy.c and main.c: the shared state
 * (sandboxes, connections, DNS records, the loop's watches) and what they
 * all call: the clock, epoll interest, events and refusals to nsboxd, the
 * per-second stats, the fd budget and the paused listeners, the sandbox
 * lookup. The proxy every network sandbox's traffic goes through: one epoll
 * loop in the main thread, which stays in the host's network namespace; a
 * "factory" thread in the egress namespace makes the sockets
 * sandbox.expose connects from. Everything a sandbox sends is hostile
 * input: bounded buffers, no blocking call, no crash. */
#pragma once

#include <ares.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "inject.h"
#include "intercept.h"
#include "netpolicy.h"
#include "sniff.h"

#define EGRESS_CONN_PER_SANDBOX   256
#define EGRESS_EXPOSE_PER_SANDBOX 64 /* sandbox.expose connections of one sandbox */
#define EGRESS_FD_RESERVE         32 /* stdio, control, epoll, timers, factory, c-ares, getifaddrs, ... */
#define EGRESS_ACCEPT_PAUSE_MS    100
#define EGRESS_CONN_MAX           16384
#define EGRESS_BUF                16384
#define EGRESS_HEAD_TIMEOUT_MS    10000
#define EGRESS_CONNECT_TIMEOUT_MS 10000
#define EGRESS_DRAIN_TIMEOUT_MS   2000
#define EGRESS_DNS_PENDING_MAX    64
#define EGRESS_DNS_RECORDS        256
#define EGRESS_DNS_MIN_TTL        60
#define EGRESS_REFUSED_BURST      20
#define EGRESS_HOST_ADDRS_MAX     64
#define EGRESS_EXPLICIT_PORT      3128

enum watch_kind {
        WATCH_CONTROL,
        WATCH_LEASE,
        WATCH_FACTORY,
        WATCH_TIMER,
        WATCH_RESUME,
        WATCH_ARES,
        WATCH_TCP_LISTENER,
        WATCH_DNS,
        WATCH_EXPOSE_LISTENER,
        WATCH_CONN_CLIENT,
        WATCH_CONN_UPSTREAM,
};

/* What epoll_event.data.ptr points at. fd -1: closed, events still queued
 * in the current batch for it are skipped. */
struct watch {
        enum watch_kind kind;
        int fd;
        uint32_t events; /* registered, 0 when not in epoll */
        void *obj;
        bool paused; /* a listener out of epoll until egress.resume fires */
};

struct dns_record {
        char name[NETPOLICY_NAME_MAX + 1];
        uint32_t addr;
        time_t expires;
};

struct dns_query;
struct conn;

struct expose {
        struct expose *next;
        struct egress_sandbox *sandbox;
        uint16_t port;
        uid_t owner; /* the sandbox's: with root, the only uid let in */
        struct watch listener;
};

/* What a sandbox did through the proxy, counted. */
struct egress_counts {
        uint64_t bytes_in, bytes_out, connections, refused, dns_queries;
        uint64_t secrets_injected; /* requests that had its secrets put in */
};

struct egress_sandbox {
        struct egress_sandbox *next;
        char id[128];
        uint32_t address, gateway; /* host byte order */
        struct netpolicy *policy;
        struct inject_secrets *secrets; /* NULL: none */
        struct intercept_ca *ca;        /* with secrets: TLS to their hosts is intercepted */
        struct watch tcp, dns;
        struct expose *exposes;
        struct conn *conns;      /* this sandbox's, through conn->sandbox_next */
        unsigned n_conns;        /* its own (not sandbox.expose's) */
        unsigned n_expose_conns; /* sandbox.expose's */
        struct dns_query *queries;
        unsigned n_queries;
        struct dns_record records[EGRESS_DNS_RECORDS];
        unsigned next_record;
        struct egress_counts delta; /* since the last stats event */
        /* What the stats events said so far, summed: a next nsboxd that
         * adopts this proxy carries the sandbox's stats on from there. */
        struct egress_counts sent;
        double refused_tokens;
        bool removed;
};

enum conn_state {
        CONN_SNIFF,     /* reading a request head / ClientHello */
        CONN_RESOLVE,   /* waiting for c-ares */
        CONN_FACTORY,   /* expose: waiting for the factory thread's socket */
        CONN_CONNECT,   /* upstream connect in progress */
        CONN_RELAY,     /* bytes both ways */
        CONN_DRAIN,     /* refusal written: reading what is left, then close */
        CONN_DNS_REPLY, /* DNS over TCP: writing an answer, then the next query */
};

/* CONN_DNS: TCP to the sandbox's own gateway port 53 (a resolver's
 * fallback after a truncated answer): DNS over TCP, the UDP path's policy. */
enum conn_mode { CONN_HTTP, CONN_TLS, CONN_OTHER, CONN_EXPLICIT, CONN_EXPOSE, CONN_DNS };

struct half {
        uint8_t *buf;
        size_t start, end, cap;
        size_t held; /* at the end, not sent yet: could begin a secret's value (u2c_mask) */
        bool eof;    /* the source said EOF */
        bool shut;   /* shutdown(SHUT_WR) done on the destination */
};

struct conn {
        struct conn *next, *prev;       /* all connections */
        struct conn *sandbox_next;      /* the sandbox's */
        struct egress_sandbox *sandbox; /* NULL once the sandbox is gone */
        enum conn_state state;
        enum conn_mode mode;
        struct watch client, upstream;
        struct half c2u, u2c;
        /* An HTTP head forwarded by the proxy (port 80, absolute-form):
         * that one request reaches upstream, nothing after it. */
        bool c2u_limited;
        bool c2u_chunked;     /* its body is chunked: followed by c2u_chunks */
        bool c2u_done;        /* the request ended: later bytes are dropped */
        bool c2u_extra_noted; /* bytes after it were seen (and maybe refused) */
        uint64_t c2u_left;    /* Content-Length: body bytes still forwarded */
        struct sniff_chunked c2u_chunks;
        struct inject_scan c2u_scan;             /* its body, for placeholders */
        struct inject_scan c2u_data_scan;        /* a chunked body's data, joined */
        const struct inject_secret *c2u_refused; /* the secret whose placeholder it carried */
        struct inject_secrets *u2c_mask;         /* its answer's: the values put into it, masked */
        int64_t deadline_ms;
        bool named;
        char name[NETPOLICY_NAME_MAX + 1];
        uint32_t dst_addr; /* host order: the original destination */
        uint16_t dst_port;
        uint32_t connect_addr;
        uint16_t connect_port;
        struct sniff_http http;
        bool needs_owner;     /* transparent: dst must be an address of name */
        bool holds_secret;    /* c2u.buf had a secret's value: wiped when freed */
        bool intercept;       /* TLS to a secret's host: handed to intercept.c once connected */
        bool reply_connected; /* explicit CONNECT: answer 200 when connected */
        struct conn_lookup *lookup;
        bool closed;
};

struct conn_lookup {
        struct conn *conn; /* NULL once the connection is gone */
};

struct egress {
        int epoll_fd;
        struct watch control, factory, timer, resume;
        /* Live restore (--lease-fd): its hangup says nsboxd is gone; the
         * proxy then waits grace_ms for a next nsboxd's lease (orphan_since_ms
         * the moment it went, 0 with a manager) and ends itself after. */
        struct watch lease;
        int64_t grace_ms, orphan_since_ms;
        /* Connections are budgeted from the fds the process got: two each,
         * after the listeners (two per sandbox, one per expose) and
         * EGRESS_FD_RESERVE. */
        unsigned fd_limit, n_listener_fds;
        ares_channel ares;
        struct egress_sandbox *sandboxes;
        struct conn *conns;
        unsigned n_conns;
        struct conn *graveyard; /* closed in this batch, freed after it */
        struct factory_wait *factory_head, **factory_tail;
        uint32_t host_addrs[EGRESS_HOST_ADDRS_MAX];
        size_t n_host_addrs;
        struct out_msg *out_head, **out_tail;
        unsigned n_out;
        int64_t last_second_ms, last_host_refresh_ms;
};

struct factory_wait {
        struct factory_wait *next;
        struct conn *conn; /* NULL once the connection is gone */
};

extern struct egress egress;

/* CLOCK_MONOTONIC in milliseconds: deadlines and ticks. */
int64_t egress_now_ms(void);
/* Set a watch's epoll interest; 0 takes it out of epoll. */
void egress_watch(struct watch *w, uint32_t events);
void egress_unwatch(struct watch *w);

/* --- events to nsboxd (the control socket) --- */
/* Queue one event (stolen) and send what the socket takes now. */
void egress_send_event(json_t *event);
/* The control socket is writable again: send what is queued. */
void egress_control_flush(void);
/* A refused connection or query, counted; an event while the sandbox's
 * burst of EGRESS_REFUSED_BURST (one more a second) lasts. */
void egress_refused(struct egress_sandbox *sb, const char *name, uint32_t addr, uint16_t port,
                    const char *reason);
/* A refused DNS question for name: the event says "lookup" (and port 53),
 * for nsboxd shows it as a name lookup, not as a connection to port 53. */
void egress_refused_lookup(struct egress_sandbox *sb, const char *name, const char *reason);
/* Once a second: each sandbox's counters since the last stats event. */
void egress_send_stats(void);
/* counts as nsboxd reads them: a "stats" event's fields, an "adopt"
 * event's "stats". */
json_t *egress_counts_json(const struct egress_counts *counts);

/* --- the host, the fd budget, listeners --- */
void egress_refresh_host_addrs(void);
/* How many connections the fds left allow (at most EGRESS_CONN_MAX). */
unsigned egress_conn_limit(void);
/* accept4 failed: the listener is out of epoll until egress_resume_listeners. */
void egress_accept_failed(struct watch *listener, const char *who, int error);
/* The resume timer fired: listeners paused by egress_accept_failed back in epoll. */
void egress_resume_listeners(void);

struct egress_sandbox *egress_sandbox_find(const char *id);
