/* SPDX-License-Identifier: Apache-2.0 */
/* The TCP side of nsbox-egress: a sandbox's connections (redirected by nft
 * to its listener at gateway:1) are judged by name (HTTP Host on 80, TLS
 * SNI on 443, the explicit proxy at gateway:3128) or by address, then
 * joined to an upstream connection made from the host's netns; and
 * sandbox.expose's connections from the host joined to the sandbox. */
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter_ipv4.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "dns.h"
#include "log.h"
#include "peer.h"

static const char tls_access_denied[] = "\x15\x03\x03\x00\x02\x02\x31";

static void conn_update(struct conn *c);
static void conn_decide(struct conn *c);
static void dns_reply(struct conn *c, const uint8_t *msg, size_t len);

static const char *addr_text(uint32_t addr, char buf[INET_ADDRSTRLEN])
{
        struct in_addr in = { .s_addr = htonl(addr) };
        return inet_ntop(AF_INET, &in, buf, INET_ADDRSTRLEN);
}

static bool half_alloc(struct half *h, size_t cap)
{
        if (h->buf == NULL) {
                h->buf = malloc(cap);
                if (h->buf == NULL)
                        return false;
                h->cap = cap;
        }
        return true;
}

static size_t half_used(const struct half *h)
{
        return h->end - h->start;
}

static size_t half_sendable(const struct half *h)
{
        return half_used(h) - h->held;
}

static void close_watch(struct watch *w, bool reset)
{
        if (w->fd < 0)
                return;
        egress_unwatch(w);
        if (reset) {
                struct linger l = { .l_onoff = 1, .l_linger = 0 };
                setsockopt(w->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
        }
        close(w->fd);
        w->fd = -1;
}

static void conn_free(struct conn *c)
{
        if (c->holds_secret && c->c2u.buf != NULL)
                explicit_bzero(c->c2u.buf, c->c2u.cap);
        if (c->u2c_mask != NULL && c->u2c.buf != NULL)
                explicit_bzero(c->u2c.buf, c->u2c.cap);
        inject_unref(c->u2c_mask);
        free(c->c2u.buf);
        free(c->u2c.buf);
        free(c);
}

/* A lookup or a factory socket still on its way is no longer the
 * connection's: its late answer is dropped (conn_lookup_done and
 * proxy_factory_reply see NULL). */
static void conn_detach_waits(struct conn *c)
{
        if (c->lookup != NULL) {
                c->lookup->conn = NULL;
                c->lookup = NULL;
        }
        for (struct factory_wait *f = egress.factory_head; f != NULL; f = f->next)
                if (f->conn == c)
                        f->conn = NULL;
}

static void conn_close_how(struct conn *c, bool reset)
{
        if (c->closed)
                return;
        c->closed = true;
        close_watch(&c->client, reset);
        close_watch(&c->upstream, reset);
        conn_detach_waits(c);
        struct egress_sandbox *sb = c->sandbox;
        if (sb != NULL) {
                for (struct conn **pp = &sb->conns; *pp != NULL; pp = &(*pp)->sandbox_next)
                        if (*pp == c) {
                                *pp = c->sandbox_next;
                                break;
                        }
                if (c->mode != CONN_EXPOSE)
                        sb->n_conns--;
                else
                        sb->n_expose_conns--;
                c->sandbox = NULL;
        }
        if (c->prev != NULL)
                c->prev->next = c->next;
        else
                egress.conns = c->next;
        if (c->next != NULL)
                c->next->prev = c->prev;
        egress.n_conns--;
        /* Events for it may still be queued in this epoll batch. */
        c->next = egress.graveyard;
        egress.graveyard = c;
}

void proxy_conn_close(struct conn *c)
{
        conn_close_how(c, false);
}

void proxy_free_graveyard(void)
{
        while (egress.graveyard != NULL) {
                struct conn *c = egress.graveyard;
                egress.graveyard = c->next;
                conn_free(c);
        }
}

static struct conn *conn_new(struct egress_sandbox *sb, enum conn_mode mode, int fd)
{
        struct conn *c = calloc(1, sizeof(*c));
        if (c == NULL)
                return NULL;
        c->sandbox = sb;
        c->mode = mode;
        c->client = (struct watch){ .kind = WATCH_CONN_CLIENT, .fd = fd, .obj = c };
        c->upstream = (struct watch){ .kind = WATCH_CONN_UPSTREAM, .fd = -1, .obj = c };
        c->next = egress.conns;
        if (egress.conns != NULL)
                egress.conns->prev = c;
        egress.conns = c;
        egress.n_conns++;
        c->sandbox_next = sb->conns;
        sb->conns = c;
        if (mode != CONN_EXPOSE)
                sb->n_conns++;
        else
                sb->n_expose_conns++;
        return c;
}

/* Write what fits now; a refusal is small and the socket's buffer empty. */
static void send_now(int fd, const void *data, size_t len)
{
        if (fd >= 0)
                (void)!send(fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* What the client sees of a refusal or an upstream failure: a 403/502 on
 * HTTP, a TLS alert on 443, a reset elsewhere. Then the rest of what it
 * sends is read and dropped for a moment so the answer is not lost to a
 * reset from unread data. */
static void conn_answer_and_close(struct conn *c, int status)
{
        char shown[NETPOLICY_NAME_MAX + INET_ADDRSTRLEN + 8], a[INET_ADDRSTRLEN];
        /* Answered (a refusal, or the resolver or factory too slow): a late
         * answer must not connect this connection after all. */
        conn_detach_waits(c);
        bool http = c->mode == CONN_EXPLICIT || (c->mode == CONN_HTTP && c->http.head_len > 0);
        if (c->mode == CONN_TLS && c->named) {
                send_now(c->client.fd, tls_access_denied, sizeof(tls_access_denied) - 1);
        } else if (http) {
                char body[NETPOLICY_NAME_MAX + 64], msg[NETPOLICY_NAME_MAX + 256];
                if (c->named)
                        snprintf(shown, sizeof(shown), "%s", c->name);
                else
                        snprintf(shown, sizeof(shown), "%s", addr_text(c->connect_addr, a));
                const char *line = status == 403   ? "403 Forbidden"
                                   : status == 400 ? "400 Bad Request"
                                                   : "502 Bad Gateway";
                if (status == 403)
                        snprintf(body, sizeof(body), "nsbox: network policy refused %s\n", shown);
                else if (status == 400)
                        snprintf(body, sizeof(body), "nsbox: bad request\n");
                else
                        snprintf(body, sizeof(body), "nsbox: could not connect to %s\n", shown);
                int n = snprintf(msg, sizeof(msg),
                                 "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                                 "Connection: close\r\n\r\n%s",
                                 line, strlen(body), body);
                send_now(c->client.fd, msg, (size_t)n);
        } else {
                conn_close_how(c, true);
                return;
        }
        close_watch(&c->upstream, false);
        if (c->client.fd < 0) {
                proxy_conn_close(c);
                return;
        }
        shutdown(c->client.fd, SHUT_WR);
        c->state = CONN_DRAIN;
        c->deadline_ms = egress_now_ms() + EGRESS_DRAIN_TIMEOUT_MS;
        conn_update(c);
}

static void conn_refuse(struct conn *c, const char *reason)
{
        if (c->sandbox != NULL) {
                uint32_t addr = c->connect_addr ? c->connect_addr : c->dst_addr;
                uint16_t port = c->connect_port ? c->connect_port : c->dst_port;
                egress_refused(c->sandbox, c->named ? c->name : NULL, addr, port, reason);
        }
        conn_answer_and_close(c, 403);
}

/* Refused once relaying: the request's head (and some of its body) went
 * upstream, so nothing is answered; the log and event say why. */
static void conn_refused_midway(struct conn *c, const char *reason)
{
        if (c->sandbox != NULL)
                egress_refused(c->sandbox, c->named ? c->name : NULL,
                               c->connect_addr ? c->connect_addr : c->dst_addr,
                               c->connect_port ? c->connect_port : c->dst_port, reason);
}

/* --- epoll interest ------------------------------------------------------- */

static void conn_update(struct conn *c)
{
        if (c->closed)
                return;
        uint32_t ce = 0, ue = 0;
        switch (c->state) {
        case CONN_SNIFF:
                ce = half_used(&c->c2u) < c->c2u.cap ? EPOLLIN : 0;
                break;
        case CONN_RESOLVE:
        case CONN_FACTORY:
                break;
        case CONN_CONNECT:
                ue = EPOLLOUT;
                break;
        case CONN_DRAIN:
                ce = EPOLLIN;
                break;
        case CONN_DNS_REPLY:
                ce = EPOLLOUT;
                break;
        case CONN_RELAY:
                if (!c->c2u.eof && half_used(&c->c2u) < c->c2u.cap)
                        ce |= EPOLLIN;
                if (half_sendable(&c->u2c) > 0)
                        ce |= EPOLLOUT;
                if (!c->u2c.eof && half_used(&c->u2c) < c->u2c.cap)
                        ue |= EPOLLIN;
                if (half_used(&c->c2u) > 0)
                        ue |= EPOLLOUT;
                break;
        }
        if (c->client.fd >= 0)
                egress_watch(&c->client, ce);
        if (c->upstream.fd >= 0)
                egress_watch(&c->upstream, ue);
}

/* --- relay ---------------------------------------------------------------- */

/* Bytes after the one request a limited connection forwards: dropped. One
 * that looks like another request head is refused (once per connection),
 * so a smuggling attempt shows up in the sandbox's refusals. */
static void c2u_note_extra(struct conn *c, const uint8_t *p, size_t n)
{
        if (c->c2u_extra_noted || c->sandbox == NULL)
                return;
        c->c2u_extra_noted = true;
        struct sniff_http h;
        if (sniff_http_head((const char *)p, n, &h) != SNIFF_INVALID)
                egress_refused(c->sandbox, c->named ? c->name : NULL, c->connect_addr, c->connect_port,
                               "second request on one connection");
}

/* A placeholder found in the body (c->c2u_refused): when the head went
 * already, the request is cut short (conn_decide refuses it otherwise). */
static void c2u_refused_midway(struct conn *c)
{
        if (c->state == CONN_SNIFF)
                return;
        char why[192], said[224];
        inject_refusal(c->c2u_refused, c->named ? c->name : NULL, why, sizeof(why));
        snprintf(said, sizeof(said), "its body %s", why);
        conn_refused_midway(c, said);
}

/* Of n bytes from the client, how many belong to the one request a limited
 * connection forwards (its body by Content-Length or by chunk framing).
 * false: the chunk framing is malformed. */
static bool c2u_take(struct conn *c, const uint8_t *p, size_t *n)
{
        if (!c->c2u_limited)
                return true;
        size_t keep = 0;
        struct inject_secrets *secrets = c->sandbox != NULL ? c->sandbox->secrets : NULL;
        if (!c->c2u_done && c->c2u_chunked) {
                const struct inject_secret *split = NULL;
                keep = inject_scan_chunked(secrets, &c->c2u_chunks, &c->c2u_data_scan, p, *n, &split);
                if (split != NULL) {
                        c->c2u_refused = split;
                        c2u_refused_midway(c);
                        return false;
                }
                if (c->c2u_chunks.state == SNIFF_CHUNK_ERROR)
                        return false;
                c->c2u_done = c->c2u_chunks.state == SNIFF_CHUNK_DONE;
        } else if (!c->c2u_done) {
                keep = *n > c->c2u_left ? (size_t)c->c2u_left : *n;
                c->c2u_left -= keep;
                c->c2u_done = c->c2u_left == 0;
        }
        if (keep < *n)
                c2u_note_extra(c, p + keep, *n - keep);
        *n = keep;
        /* A placeholder anywhere in the body, not only in the head, is
         * refused: a body is no place for a value, whatever its host. */
        if (secrets != NULL && (c->c2u_refused = inject_scan_body(secrets, &c->c2u_scan, p, keep)) != NULL) {
                c2u_refused_midway(c);
                return false;
        }
        return true;
}

/* Read from fd into h; false when the connection is to be closed. */
static bool half_read(struct conn *c, int fd, struct half *h, bool client_side)
{
        if (h->start == h->end)
                h->start = h->end = 0;
        if (h->end == h->cap && h->start > 0) {
                memmove(h->buf, h->buf + h->start, half_used(h));
                h->end -= h->start;
                h->start = 0;
        }
        if (h->end == h->cap)
                return true;
        ssize_t n = recv(fd, h->buf + h->end, h->cap - h->end, MSG_DONTWAIT);
        if (n < 0)
                return errno == EAGAIN || errno == EINTR;
        if (n == 0) {
                h->eof = true;
                h->held = 0; /* the end: a value cut short is no value */
                return true;
        }
        size_t got = (size_t)n;
        /* One request and its body reach upstream; more (a second request,
         * with any Host) is dropped. */
        if (client_side && !c2u_take(c, h->buf + h->end, &got))
                return false;
        h->end += got;
        if (!client_side && c->u2c_mask != NULL) {
                /* A value that comes back to the sandbox (an echo of the
                 * request) is masked, as long as it was, wherever it is:
                 * the bytes held from the last read and these together. */
                size_t from = h->end - got - h->held;
                h->held = inject_mask_body(c->u2c_mask, (char *)h->buf + from, h->end - from);
        }
        if (c->sandbox != NULL && c->mode != CONN_EXPOSE) {
                if (client_side)
                        c->sandbox->delta.bytes_out += got;
                else
                        c->sandbox->delta.bytes_in += got;
        }
        return true;
}

static bool half_write(int fd, struct half *h)
{
        if (half_sendable(h) == 0)
                return true;
        ssize_t n = send(fd, h->buf + h->start, half_sendable(h), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0)
                return errno == EAGAIN || errno == EINTR;
        h->start += (size_t)n;
        return true;
}

static void relay(struct conn *c, bool upstream, uint32_t events)
{
        bool ok = true;
        if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                if (upstream && !c->u2c.eof)
                        ok = half_read(c, c->upstream.fd, &c->u2c, false);
                else if (!upstream && !c->c2u.eof)
                        ok = half_read(c, c->client.fd, &c->c2u, true);
        }
        if (ok)
                ok = half_write(c->upstream.fd, &c->c2u) && half_write(c->client.fd, &c->u2c);
        if (!ok) {
                conn_close_how(c, true);
                return;
        }
        if (c->c2u.eof && half_used(&c->c2u) == 0 && !c->c2u.shut) {
                shutdown(c->upstream.fd, SHUT_WR);
                c->c2u.shut = true;
        }
        if (c->u2c.eof && half_used(&c->u2c) == 0 && !c->u2c.shut) {
                shutdown(c->client.fd, SHUT_WR);
                c->u2c.shut = true;
        }
        if (c->c2u.shut && c->u2c.shut) {
                proxy_conn_close(c);
                return;
        }
        /* Upstream finished its answer on port 80: the client's further
         * bytes go nowhere, so do not wait for its EOF. */
        if (c->u2c.shut && c->c2u_limited && c->c2u_done && half_used(&c->c2u) == 0) {
                proxy_conn_close(c);
                return;
        }
        conn_update(c);
}

/* --- connecting ----------------------------------------------------------- */

static void conn_connect_fd(struct conn *c, int fd, uint32_t addr, uint16_t port)
{
        struct sockaddr_in sa = { .sin_family = AF_INET,
                                  .sin_port = htons(port),
                                  .sin_addr.s_addr = htonl(addr) };
        c->upstream.fd = fd;
        c->state = CONN_CONNECT;
        c->deadline_ms = egress_now_ms() + EGRESS_CONNECT_TIMEOUT_MS;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
                conn_answer_and_close(c, 502);
                return;
        }
        conn_update(c);
}

static void conn_connect(struct conn *c)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                log_warn("upstream socket: %s", strerror(errno));
                conn_answer_and_close(c, 502);
                return;
        }
        conn_connect_fd(c, fd, c->connect_addr, c->connect_port);
}

enum rewrite_result { REWRITE_OK, REWRITE_FAILED, REWRITE_REFUSED_SECRET };

/* The head forwarded upstream on port 80 and for the explicit proxy's
 * absolute-form requests (inject_rewrite_head: one request, the sandbox's
 * secrets for this host put in, *refused naming a secret whose
 * placeholder was where its value may not go), then the
 * body bytes already read, up to the request's end. Without apply the
 * request is judged only (the buffer stays as the sandbox sent it). */
static enum rewrite_result rewrite_http_head(struct conn *c, bool apply, const struct inject_secret **refused)
{
        const struct sniff_http *h = &c->http;
        struct inject_secrets *secrets = c->sandbox != NULL ? c->sandbox->secrets : NULL;
        size_t cap = EGRESS_BUF + 1024;
        if (secrets != NULL)
                cap += EGRESS_BUF; /* values longer than their placeholders */
        char *out = malloc(cap);
        if (out == NULL)
                return REWRITE_FAILED;
        const char *in = (const char *)c->c2u.buf + c->c2u.start;
        size_t n = 0;
        enum inject_result r =
            inject_rewrite_head(secrets, c->named ? c->name : NULL, in, h, false, out, cap, &n, refused);
        size_t body = half_used(&c->c2u) - h->head_len;
        c->c2u_limited = true;
        c->c2u_chunked = h->chunked;
        c->c2u_left = h->content_length;
        c->c2u_done = false;
        if (r != INJECT_OK || !c2u_take(c, (const uint8_t *)in + h->head_len, &body) || n + body > cap) {
                explicit_bzero(out, cap);
                free(out);
                if (r == INJECT_OK && c->c2u_refused != NULL)
                        *refused = c->c2u_refused;
                return r == INJECT_REFUSED || c->c2u_refused != NULL ? REWRITE_REFUSED_SECRET
                                                                     : REWRITE_FAILED;
        }
        if (!apply) { /* judged only: an interception thread sends it */
                explicit_bzero(out, cap);
                free(out);
                c->c2u_limited = false;
                return REWRITE_OK;
        }
        memcpy(out + n, in + h->head_len, body);
        n += body;
        free(c->c2u.buf);
        c->c2u.buf = (uint8_t *)out;
        c->c2u.cap = cap;
        c->c2u.start = 0;
        c->c2u.end = n;
        c->holds_secret = secrets != NULL;
        if (c->sandbox != NULL && c->named && inject_for_host(secrets, c->name)) {
                c->sandbox->delta.secrets_injected++;
                if (secrets->longest_value > 0)
                        c->u2c_mask = inject_ref(secrets);
        }
        return REWRITE_OK;
}

static void conn_connected(struct conn *c)
{
        int error = 0;
        socklen_t len = sizeof(error);
        if (getsockopt(c->upstream.fd, SOL_SOCKET, SO_ERROR, &error, &len) < 0)
                error = errno;
        if (error == EINPROGRESS)
                return;
        if (error != 0) {
                conn_answer_and_close(c, 502);
                return;
        }
        if (!half_alloc(&c->c2u, EGRESS_BUF) || !half_alloc(&c->u2c, EGRESS_BUF)) {
                conn_close_how(c, true);
                return;
        }
        if (c->sandbox != NULL && c->mode != CONN_EXPOSE)
                c->sandbox->delta.connections++;
        if (c->reply_connected) {
                static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
                send_now(c->client.fd, ok, sizeof(ok) - 1);
        }
        /* sandbox.update may have taken the secrets away meanwhile: then
         * the connection is relayed end to end as any other. */
        if (c->intercept && c->sandbox != NULL && c->sandbox->ca != NULL && c->sandbox->secrets != NULL) {
                /* The fds go to the interception thread: the loop forgets them. */
                int client = c->client.fd, upstream = c->upstream.fd;
                egress_unwatch(&c->client);
                egress_unwatch(&c->upstream);
                c->client.fd = c->upstream.fd = -1;
                int r = intercept_start(client, upstream, c->c2u.buf + c->c2u.start, half_used(&c->c2u),
                                        c->mode != CONN_HTTP, c->connect_port, c->name, c->sandbox->id,
                                        c->sandbox->ca, c->sandbox->secrets);
                const char *full = r == -EBUSY ? intercept_full(c->sandbox->ca) : NULL;
                if (r == -EBUSY) /* others were handed over since conn_decide's check */
                        egress_refused(c->sandbox, c->name, c->connect_addr, c->connect_port,
                                       full != NULL ? full : "too many intercepted connections");
                else if (r < 0)
                        log_warn("sandbox %s: intercept %s: out of memory or threads", c->sandbox->id,
                                 c->name);
                proxy_conn_close(c);
                return;
        }
        c->state = CONN_RELAY;
        relay(c, false, 0);
}

/* --- deciding ------------------------------------------------------------- */

static void conn_lookup_done(void *arg, int status, int timeouts, struct hostent *he)
{
        struct conn_lookup *l = arg;
        struct conn *c = l->conn;
        free(l);
        if (c == NULL)
                return;
        c->lookup = NULL;
        if (c->sandbox == NULL) {
                proxy_conn_close(c);
                return;
        }
        size_t n = 0;
        uint32_t addrs[16];
        if (status == ARES_SUCCESS && he != NULL && he->h_addrtype == AF_INET)
                for (char **a = he->h_addr_list; *a != NULL && n < ARRAY_SIZE(addrs); a++) {
                        struct in_addr in;
                        memcpy(&in, *a, sizeof(in));
                        addrs[n++] = ntohl(in.s_addr);
                }
        struct egress_sandbox *sb = c->sandbox;
        if (c->needs_owner) {
                /* Transparent: is the address the sandbox went to one of
                 * the name's now? */
                for (size_t i = 0; i < n; i++)
                        if (addrs[i] == c->dst_addr) {
                                c->needs_owner = false;
                                conn_connect(c);
                                return;
                        }
                char reason[NETPOLICY_NAME_MAX + 32];
                snprintf(reason, sizeof(reason), "address is not %s's", c->name);
                conn_refuse(c, reason);
                return;
        }
        /* Explicit proxy: the first address the policy lets it reach. */
        if (n == 0) {
                conn_refuse(c, "name does not resolve");
                return;
        }
        enum netpolicy_verdict first = NETPOLICY_NOT_ALLOWED;
        for (size_t i = 0; i < n; i++) {
                bool by_name;
                enum netpolicy_verdict v = netpolicy_check_named(
                    sb->policy, c->name, addrs[i], egress.host_addrs, egress.n_host_addrs, &by_name);
                if (i == 0)
                        first = v;
                if (v == NETPOLICY_ALLOW) {
                        c->connect_addr = addrs[i];
                        conn_connect(c);
                        return;
                }
        }
        c->connect_addr = addrs[0];
        conn_refuse(c, netpolicy_reason(first));
}

static void conn_resolve(struct conn *c)
{
        struct conn_lookup *l = calloc(1, sizeof(*l));
        if (l == NULL) {
                conn_close_how(c, true);
                return;
        }
        l->conn = c;
        c->lookup = l;
        c->state = CONN_RESOLVE;
        c->deadline_ms = egress_now_ms() + EGRESS_CONNECT_TIMEOUT_MS;
        conn_update(c);
        ares_gethostbyname(egress.ares, c->name, AF_INET, conn_lookup_done, l);
}

static void conn_decide_unnamed(struct conn *c)
{
        struct egress_sandbox *sb = c->sandbox;
        c->named = false;
        enum netpolicy_verdict v =
            netpolicy_check_address(sb->policy, c->connect_addr, egress.host_addrs, egress.n_host_addrs);
        if (v != NETPOLICY_ALLOW) {
                conn_refuse(c, netpolicy_reason(v));
                return;
        }
        conn_connect(c);
}

/* The name the client gave (Host, SNI, CONNECT): an IPv4 literal makes the
 * connection unnamed; anything that is not a host name is refused. */
static bool conn_take_name(struct conn *c, const char *raw, bool *unnamed)
{
        uint32_t literal;
        *unnamed = false;
        if (raw[0] == '\0' || netpolicy_parse_ipv4(raw, strlen(raw), &literal)) {
                *unnamed = true;
                if (raw[0] != '\0' && c->mode == CONN_EXPLICIT)
                        c->connect_addr = literal;
                return true;
        }
        if (netpolicy_name_normalize(raw, strlen(raw), c->name) < 0)
                return false;
        c->named = true;
        return true;
}

static void conn_decide_named(struct conn *c)
{
        struct egress_sandbox *sb = c->sandbox;
        if (c->mode == CONN_EXPLICIT) {
                /* The proxy resolves only a name the policy allows by name:
                 * asking the resolver about any other name would carry it
                 * past the DNS policy (exfiltration), and the 200/403 would
                 * tell the sandbox what it resolves to. A destination only
                 * an allow CIDR opens is given as an IP literal. */
                enum netpolicy_verdict v = netpolicy_check_name(sb->policy, c->name);
                if (v != NETPOLICY_ALLOW) {
                        conn_refuse(c, netpolicy_reason(v));
                        return;
                }
                conn_resolve(c);
                return;
        }
        /* Transparent: the name is resolved (conn_resolve below) only when
         * netpolicy_check_named allowed it by name (by_name); an address
         * an allow CIDR opens is connected to without a lookup. */
        bool by_name;
        enum netpolicy_verdict v = netpolicy_check_named(sb->policy, c->name, c->dst_addr, egress.host_addrs,
                                                         egress.n_host_addrs, &by_name);
        if (v != NETPOLICY_ALLOW) {
                conn_refuse(c, netpolicy_reason(v));
                return;
        }
        if (by_name && !dns_address_recorded(sb, c->name, c->dst_addr)) {
                c->needs_owner = true;
                conn_resolve(c);
                return;
        }
        conn_connect(c);
}

/* DNS over TCP: the next whole query (2-byte length, then the message)
 * in c2u goes to dns_tcp_query; a length over EGRESS_DNS_TCP_QUERY_MAX or
 * under a header drops the connection. */
static void dns_next_query(struct conn *c)
{
        struct half *h = &c->c2u;
        size_t used = half_used(h);
        if (used < 2) {
                if (c->c2u.eof)
                        proxy_conn_close(c);
                return;
        }
        size_t len = (size_t)h->buf[h->start] << 8 | h->buf[h->start + 1];
        if (len < 12 || len > EGRESS_DNS_TCP_QUERY_MAX) {
                conn_close_how(c, true);
                return;
        }
        if (used < 2 + len) {
                if (c->c2u.eof)
                        proxy_conn_close(c);
                return;
        }
        const uint8_t *pkt = h->buf + h->start + 2;
        h->start += 2 + len;
        dns_tcp_query(c, pkt, len, dns_reply);
}

/* dns_tcp_query's answer to the connection's query: written with its
 * length prefix (CONN_DNS_REPLY), then the next query is read. */
static void dns_reply(struct conn *c, const uint8_t *msg, size_t len)
{
        if (c->closed)
                return;
        if (len == 0 || len > 65535) {
                conn_close_how(c, true);
                return;
        }
        free(c->u2c.buf);
        c->u2c = (struct half){ .buf = malloc(2 + len), .cap = 2 + len };
        if (c->u2c.buf == NULL) {
                conn_close_how(c, true);
                return;
        }
        c->u2c.buf[0] = (uint8_t)(len >> 8);
        c->u2c.buf[1] = (uint8_t)len;
        memcpy(c->u2c.buf + 2, msg, len);
        c->u2c.end = 2 + len;
        c->state = CONN_DNS_REPLY;
        c->deadline_ms = egress_now_ms() + EGRESS_HEAD_TIMEOUT_MS;
        conn_update(c);
}

static void dns_reply_written(struct conn *c)
{
        if (!half_write(c->client.fd, &c->u2c)) {
                conn_close_how(c, true);
                return;
        }
        if (half_used(&c->u2c) > 0)
                return;
        /* The next query, perhaps already read. */
        c->state = CONN_SNIFF;
        c->deadline_ms = egress_now_ms() + EGRESS_HEAD_TIMEOUT_MS;
        dns_next_query(c);
        if (!c->closed && c->state == CONN_SNIFF)
                conn_update(c);
}

/* Enough of the first bytes is here (or the wait is over): decide. */
static void conn_decide(struct conn *c)
{
        char raw[SNIFF_NAME_MAX + 1];
        const char *full;
        bool unnamed = true;
        const uint8_t *data = c->c2u.buf + c->c2u.start;
        size_t len = half_used(&c->c2u);
        enum sniff_result r;
        c->connect_addr = c->dst_addr;
        c->connect_port = c->dst_port;
        switch (c->mode) {
        case CONN_TLS:
                r = sniff_tls_sni(data, len, raw);
                if (r == SNIFF_NEED_MORE && len < c->c2u.cap && !c->c2u.eof)
                        return;
                if (r == SNIFF_OK && !conn_take_name(c, raw, &unnamed)) {
                        c->named = true;
                        snprintf(c->name, sizeof(c->name), "(bad name)");
                        conn_refuse(c, "not a host name");
                        return;
                }
                /* Only the secrets' hosts: every other TLS stays end to end. */
                c->intercept =
                    c->named && c->sandbox->ca != NULL && inject_for_host(c->sandbox->secrets, c->name);
                if (c->intercept && (full = intercept_full(c->sandbox->ca)) != NULL) {
                        conn_refuse(c, full);
                        return;
                }
                break;
        case CONN_HTTP:
        case CONN_EXPLICIT:
                r = sniff_http_head((const char *)data, len, &c->http);
                if (r == SNIFF_NEED_MORE && len < c->c2u.cap && !c->c2u.eof)
                        return;
                if (r != SNIFF_OK) {
                        c->http.head_len = 0;
                        if (c->mode == CONN_EXPLICIT) {
                                conn_answer_and_close(c, 400);
                                return;
                        }
                        break; /* not HTTP: judged by address, bytes as they are */
                }
                if (c->mode == CONN_EXPLICIT) {
                        if (!c->http.connect && !c->http.absolute) {
                                conn_answer_and_close(c, 400);
                                return;
                        }
                        c->connect_port = c->http.port ? c->http.port : 80;
                        c->reply_connected = c->http.connect;
                }
                if (!conn_take_name(c, c->http.host, &unnamed)) {
                        c->named = true;
                        snprintf(c->name, sizeof(c->name), "(bad name)");
                        conn_refuse(c, "not a host name");
                        return;
                }
                if (c->mode == CONN_EXPLICIT && unnamed && c->http.host[0] == '\0') {
                        conn_answer_and_close(c, 400);
                        return;
                }
                if (c->http.connect) {
                        /* The tunnel starts after the CONNECT head; to a
                         * secret's host on 443 it is TLS, intercepted as
                         * a transparent connection's is. */
                        c->c2u.start += c->http.head_len;
                        c->intercept = c->named && c->connect_port == 443 && c->sandbox->ca != NULL &&
                                       inject_for_host(c->sandbox->secrets, c->name);
                        if (c->intercept && (full = intercept_full(c->sandbox->ca)) != NULL) {
                                conn_refuse(c, full);
                                return;
                        }
                } else {
                        /* Plain HTTP to a secret's host (port 80): its
                         * requests, each judged and given the secrets,
                         * keep-alive, in an interception thread; the
                         * first is judged here, refused before any connect. */
                        c->intercept = c->mode == CONN_HTTP && c->named && c->sandbox->ca != NULL &&
                                       inject_for_host(c->sandbox->secrets, c->name);
                        const struct inject_secret *refused = NULL;
                        enum rewrite_result rr = rewrite_http_head(c, !c->intercept, &refused);
                        if (rr == REWRITE_REFUSED_SECRET) {
                                char why[192];
                                inject_refusal(refused, c->named ? c->name : NULL, why, sizeof(why));
                                conn_refuse(c, why);
                                return;
                        }
                        if (rr != REWRITE_OK) {
                                conn_close_how(c, true);
                                return;
                        }
                        if (c->intercept && (full = intercept_full(c->sandbox->ca)) != NULL) {
                                conn_refuse(c, full);
                                return;
                        }
                }
                break;
        default:
                break;
        }
        if (unnamed)
                conn_decide_unnamed(c);
        else
                conn_decide_named(c);
}

static void sniff_read(struct conn *c)
{
        if (!half_read(c, c->client.fd, &c->c2u, true)) {
                conn_close_how(c, true);
                return;
        }
        if (c->c2u.eof && half_used(&c->c2u) == 0) {
                proxy_conn_close(c);
                return;
        }
        if (c->mode == CONN_DNS)
                dns_next_query(c);
        else
                conn_decide(c);
        if (!c->closed && c->state == CONN_SNIFF)
                conn_update(c);
}

/* --- events --------------------------------------------------------------- */

void proxy_conn_event(struct conn *c, bool upstream, uint32_t events)
{
        if (c->closed)
                return;
        switch (c->state) {
        case CONN_SNIFF:
                if (!upstream)
                        sniff_read(c);
                break;
        case CONN_CONNECT:
                if (upstream)
                        conn_connected(c);
                break;
        case CONN_RELAY:
                relay(c, upstream, events);
                break;
        case CONN_DNS_REPLY:
                if (!upstream)
                        dns_reply_written(c);
                break;
        case CONN_DRAIN:
                if (!upstream) {
                        char sink[4096];
                        ssize_t n = recv(c->client.fd, sink, sizeof(sink), MSG_DONTWAIT);
                        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                                proxy_conn_close(c);
                }
                break;
        default:
                break;
        }
}

static bool over_limit(struct egress_sandbox *sb, bool expose)
{
        if (egress.n_conns >= egress_conn_limit())
                return true;
        /* sandbox.expose's connections have their own cap: a local user
         * must not use up the pool the sandboxes share. */
        return expose ? sb->n_expose_conns >= EGRESS_EXPOSE_PER_SANDBOX
                      : sb->n_conns >= EGRESS_CONN_PER_SANDBOX;
}

void proxy_accept(struct egress_sandbox *sb)
{
        for (int i = 0; i < 64; i++) {
                int fd = accept4(sb->tcp.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
                                char who[160];
                                snprintf(who, sizeof(who), "sandbox %s", sb->id);
                                egress_accept_failed(&sb->tcp, who, errno);
                        }
                        return;
                }
                struct sockaddr_in dst;
                socklen_t dlen = sizeof(dst);
                if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dlen) < 0 || dst.sin_family != AF_INET) {
                        close(fd);
                        continue;
                }
                uint32_t addr = ntohl(dst.sin_addr.s_addr);
                uint16_t port = ntohs(dst.sin_port);
                if (over_limit(sb, false)) {
                        egress_refused(sb, NULL, addr, port, "limit");
                        struct linger l = { .l_onoff = 1, .l_linger = 0 };
                        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
                        close(fd);
                        continue;
                }
                enum conn_mode mode = port == 80                                            ? CONN_HTTP
                                      : port == 443                                         ? CONN_TLS
                                      : port == EGRESS_EXPLICIT_PORT && addr == sb->gateway ? CONN_EXPLICIT
                                      : port == 53 && addr == sb->gateway                   ? CONN_DNS
                                                                                            : CONN_OTHER;
                struct conn *c = conn_new(sb, mode, fd);
                if (c == NULL) {
                        close(fd);
                        continue;
                }
                c->dst_addr = addr;
                c->dst_port = port;
                if (mode == CONN_OTHER) {
                        c->connect_addr = addr;
                        c->connect_port = port;
                        conn_decide_unnamed(c);
                        continue;
                }
                if (!half_alloc(&c->c2u, EGRESS_BUF)) {
                        conn_close_how(c, true);
                        continue;
                }
                c->state = CONN_SNIFF;
                c->deadline_ms = egress_now_ms() + EGRESS_HEAD_TIMEOUT_MS;
                conn_update(c);
        }
}

/* --- expose --------------------------------------------------------------- */

/* An exposed port is its sandbox owner's (and root's): another uid of the
 * host, which cannot see the sandbox, cannot use what it serves either. */
static bool peer_let_in(const struct expose *e, int fd)
{
        uid_t uid;
        int r = peer_uid(fd, &uid);
        if (r == 0 && (uid == e->owner || uid == 0))
                return true;
        if (r < 0)
                log_limited("egress expose peer", LOG_LEVEL_WARN,
                            "sandbox %s: expose %u: a connection whose peer is unknown (%s): refused",
                            e->sandbox->id, e->port, strerror(-r));
        else
                log_limited(
                    "egress expose peer", LOG_LEVEL_WARN,
                    "sandbox %s: expose %u: a connection from uid %u, not the sandbox's owner: refused",
                    e->sandbox->id, e->port, (unsigned)uid);
        return false;
}

void proxy_expose_accept(struct expose *e)
{
        for (int i = 0; i < 64; i++) {
                int fd = accept4(e->listener.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
                                char who[180];
                                snprintf(who, sizeof(who), "sandbox %s: expose %u", e->sandbox->id, e->port);
                                egress_accept_failed(&e->listener, who, errno);
                        }
                        return;
                }
                if (!peer_let_in(e, fd)) {
                        close(fd);
                        continue;
                }
                if (over_limit(e->sandbox, true)) {
                        log_limited("egress expose limit", LOG_LEVEL_WARN,
                                    "sandbox %s: expose %u: %u connections open: refused", e->sandbox->id,
                                    e->port, e->sandbox->n_expose_conns);
                        struct linger l = { .l_onoff = 1, .l_linger = 0 };
                        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
                        close(fd);
                        continue;
                }
                struct conn *c = conn_new(e->sandbox, CONN_EXPOSE, fd);
                struct factory_wait *f = calloc(1, sizeof(*f));
                if (c == NULL || f == NULL) {
                        free(f);
                        if (c != NULL)
                                conn_close_how(c, true);
                        else
                                close(fd);
                        continue;
                }
                c->connect_addr = e->sandbox->address;
                c->connect_port = e->port;
                c->state = CONN_FACTORY;
                c->deadline_ms = egress_now_ms() + EGRESS_CONNECT_TIMEOUT_MS;
                /* The factory thread answers requests in order. */
                uint8_t req = 1;
                if (send(egress.factory.fd, &req, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) {
                        free(f);
                        conn_close_how(c, true);
                        continue;
                }
                f->conn = c;
                *egress.factory_tail = f;
                egress.factory_tail = &f->next;
                conn_update(c);
        }
}

void proxy_factory_reply(struct conn *c, int fd, int error)
{
        if (c == NULL || c->closed) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        if (fd < 0) {
                log_warn("expose socket: %s", strerror(error));
                conn_close_how(c, true);
                return;
        }
        conn_connect_fd(c, fd, c->connect_addr, c->connect_port);
}

void proxy_timeouts(int64_t now)
{
        for (struct conn *c = egress.conns, *next; c != NULL; c = next) {
                next = c->next;
                if (c->state == CONN_RELAY || c->deadline_ms == 0 || now < c->deadline_ms)
                        continue;
                switch (c->state) {
                case CONN_SNIFF: /* 10 s without a full head or ClientHello */
                        conn_close_how(c, true);
                        break;
                case CONN_DRAIN:
                        proxy_conn_close(c);
                        break;
                default:
                        conn_answer_and_close(c, 502);
                        break;
                }
        }
}
