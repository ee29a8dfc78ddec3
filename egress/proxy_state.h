/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-egress's shared state: the proxy every network sandbox's traffic
 * goes through. One epoll loop in the main thread, which stays in the
 * host's network namespace; a "factory" thread in the egress namespace
 * makes the sockets sandbox.expose connects from. Everything a sandbox
 * sends is hostile input: bounded buffers, no blocking call, no crash. */
#pragma once

#include <ares.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

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
        struct watch listener;
};

struct egress_sandbox {
        struct egress_sandbox *next;
        char id[128];
        uint32_t address, gateway; /* host byte order */
        struct netpolicy *policy;
        struct watch tcp, dns;
        struct expose *exposes;
        struct conn *conns;      /* this sandbox's, through conn->sandbox_next */
        unsigned n_conns;        /* its own (not sandbox.expose's) */
        unsigned n_expose_conns; /* sandbox.expose's */
        struct dns_query *queries;
        unsigned n_queries;
        struct dns_record records[EGRESS_DNS_RECORDS];
        unsigned next_record;
        /* Deltas since the last stats event. */
        uint64_t bytes_in, bytes_out, connections, refused, dns_queries;
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
        bool eof;  /* the source said EOF */
        bool shut; /* shutdown(SHUT_WR) done on the destination */
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
        int64_t deadline_ms;
        bool named;
        char name[NETPOLICY_NAME_MAX + 1];
        uint32_t dst_addr; /* host order: the original destination */
        uint16_t dst_port;
        uint32_t connect_addr;
        uint16_t connect_port;
        struct sniff_http http;
        bool needs_owner;     /* transparent: dst must be an address of name */
        bool reply_connected; /* explicit CONNECT: answer 200 when connected */
        struct conn_lookup *lookup;
        bool closed;
};

struct conn_lookup {
        struct conn *conn; /* NULL once the connection is gone */
};

struct dns_query {
        struct dns_query *next, *prev;
        struct egress_sandbox *sandbox; /* NULL once the sandbox is gone */
        struct sockaddr_in client;
        uint16_t id;
        size_t max_reply;
        char name[NETPOLICY_NAME_MAX + 1];
        size_t query_len;
        uint8_t query[512]; /* header + question, for an error reply */
};

struct egress {
        int epoll_fd;
        struct watch control, factory, timer, resume;
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

int64_t egress_now_ms(void);
void egress_watch(struct watch *w, uint32_t events);
void egress_unwatch(struct watch *w);
void egress_send_event(json_t *event);
void egress_refused(struct egress_sandbox *sb, const char *name, uint32_t addr, uint16_t port,
                    const char *reason);
void egress_refresh_host_addrs(void);
unsigned egress_conn_limit(void);
void egress_accept_failed(struct watch *listener, const char *who, int error);
struct egress_sandbox *egress_sandbox_find(const char *id);

/* proxy.c */
void proxy_accept(struct egress_sandbox *sb);
void proxy_expose_accept(struct expose *e);
void proxy_conn_event(struct conn *c, bool upstream, uint32_t events);
void proxy_factory_reply(struct conn *c, int fd, int error);
void proxy_conn_close(struct conn *c);
void proxy_timeouts(int64_t now);
void proxy_free_graveyard(void);

/* dns.c */
int dns_init(const char *servers, nsbox_error_t **err);
void dns_receive(struct egress_sandbox *sb);
void dns_sandbox_gone(struct egress_sandbox *sb);
#define EGRESS_DNS_TCP_QUERY_MAX 512
/* One query (without its length prefix) of a CONN_DNS connection: answered
 * through proxy_dns_reply, at once or when the resolver answers. */
void dns_tcp_query(struct conn *c, const uint8_t *pkt, size_t len);
void proxy_dns_reply(struct conn *c, const uint8_t *msg, size_t len);
void dns_record_answer(struct egress_sandbox *sb, const char *name, const uint8_t *abuf, size_t alen);
bool dns_address_recorded(struct egress_sandbox *sb, const char *name, uint32_t addr);
void dns_ares_event(struct watch *w, uint32_t events);
void dns_ares_timeouts(void);
void dns_free_graveyard(void);
