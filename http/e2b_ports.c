/* SPDX-License-Identifier: Apache-2.0 */
/* Any port of a sandbox through nsbox-http (e2b_ports.h), as E2B's getHost
 * gives it: the Host PORT-ID.DOMAIN, and the proxy to that port through
 * nsboxd's port exposure, WebSocket upgrades included. */
#include "e2b_ports.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bounds.h"
#include "cleanup.h"
#include "e2b_wire.h"
#include "io.h"
#include "json_cleanup.h"
#include "nsboxd.h"
#include "reply.h"

/* A server's status line and headers are at most this long. */
#define PORT_MAX_HEAD (64u << 10)

/* A name's part before ':' (its port), as a length. */
static size_t name_length(const char *text)
{
        const char *colon = strchr(text, ':');
        return colon ? (size_t)(colon - text) : strlen(text);
}

bool e2b_ports_domain_valid(const char *domain)
{
        size_t n = name_length(domain);
        return n > 0 && domain[0] != '.' && domain[n - 1] != '.' &&
               strspn(domain, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") == n &&
               (domain[n] == '\0' || e2b_port_number(domain + n + 1, strlen(domain + n + 1)) != 0);
}

int e2b_ports_from_host(struct http_request *r)
{
        const char *domain = http_config.e2b_domain;
        const char *host = MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        if (domain == NULL || host == NULL)
                return 0;
        size_t name_len = name_length(host), domain_len = name_length(domain);
        /* PORT-ID.DOMAIN: the label before ".DOMAIN" */
        if (name_len <= domain_len + 1 || host[name_len - domain_len - 1] != '.' ||
            strncasecmp(host + name_len - domain_len, domain, domain_len) != 0)
                return 0;
        size_t label_len = name_len - domain_len - 1;
        const char *dash = memchr(host, '-', label_len);
        size_t port_len = dash ? (size_t)(dash - host) : 0, id_len = dash ? label_len - port_len - 1 : 0;
        unsigned port = e2b_port_number(host, port_len);
        if (port == 0 || id_len == 0 || id_len > E2B_MAX_SANDBOX_ID || memchr(dash + 1, '.', id_len) != NULL)
                return -EINVAL;
        /* E2B's headers may say again what the Host says (its SDKs send
         * them), never more: a page that a sandbox's server gave a browser
         * makes same-origin requests (a GET without an Origin) with any
         * headers, which must not reach another sandbox or port. A lone
         * E2b-Sandbox-Id is envd's port. */
        const char *id_header = e2b_sandbox_id(r->connection);
        const char *port_header =
            MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, "E2b-Sandbox-Port");
        if ((id_header != NULL &&
             (strlen(id_header) != id_len || strncmp(id_header, dash + 1, id_len) != 0)) ||
            (port_header != NULL && e2b_port_number(port_header, strlen(port_header)) != port) ||
            (id_header != NULL && port_header == NULL && port != E2B_ENVD_PORT))
                return -EEXIST;
        if (id_header != NULL)
                return 0;
        r->host_sandbox = strndup(dash + 1, id_len);
        if (r->host_sandbox == NULL)
                return -ENOMEM;
        snprintf(r->host_port, sizeof(r->host_port), "%u", port);
        if (MHD_set_connection_value(r->connection, MHD_HEADER_KIND, "E2b-Sandbox-Id", r->host_sandbox) !=
                MHD_YES ||
            MHD_set_connection_value(r->connection, MHD_HEADER_KIND, "E2b-Sandbox-Port", r->host_port) !=
                MHD_YES)
                return -ENOMEM;
        return 1;
}

/* Headers a proxy does not pass on: hop-by-hop ones (RFC 9110 7.6.1), and
 * nsbox-http's own credentials and routing, which the sandbox must not see. */
static bool hop_header(const char *name)
{
        static const char *const names[] = {
                "Connection",
                "Keep-Alive",
                "Proxy-Connection",
                "Proxy-Authorization",
                "TE",
                "Trailer",
                "Transfer-Encoding",
                "Upgrade",
                "Content-Length",
                "Expect",
                "X-API-KEY",
                "X-Access-Token",
                "E2B-Traffic-Access-Token",
                "E2b-Sandbox-Id",
                "E2b-Sandbox-Port",
        };
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (strcasecmp(name, names[i]) == 0)
                        return true;
        return false;
}

struct head {
        char *buf;
        size_t len, cap;
        bool failed;
};

static void head_add(struct head *h, const char *a, size_t n)
{
        if (!h->failed && http_buffer_append(&h->buf, &h->len, &h->cap, a, n) < 0)
                h->failed = true;
}

static void head_text(struct head *h, const char *s)
{
        head_add(h, s, strlen(s));
}

/* A header value or a path may carry no CR or LF into the upstream request. */
static bool one_line(const char *s)
{
        return strpbrk(s, "\r\n") == NULL;
}

static enum MHD_Result add_request_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                          const char *value)
{
        struct head *h = cls;
        (void)kind;
        if (hop_header(key) || value == NULL || !one_line(key) || !one_line(value))
                return MHD_YES;
        head_text(h, key);
        head_text(h, ": ");
        head_text(h, value);
        head_text(h, "\r\n");
        return MHD_YES;
}

/* Percent-encoded: MHD hands the path and the query's values decoded. */
static void head_encoded(struct head *h, const char *s, const char *keep)
{
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    strchr("-._~", c) != NULL || (c != 0 && strchr(keep, c) != NULL)) {
                        head_add(h, s, 1);
                } else {
                        char esc[4];
                        snprintf(esc, sizeof(esc), "%%%02X", c);
                        head_add(h, esc, 3);
                }
        }
}

struct query {
        struct head *h;
        bool first;
};

static enum MHD_Result add_argument(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
        struct query *q = cls;
        (void)kind;
        head_text(q->h, q->first ? "?" : "&");
        q->first = false;
        head_encoded(q->h, key, "!$'()*+,;:@/?");
        if (value != NULL) {
                head_text(q->h, "=");
                head_encoded(q->h, value, "!$'()*,;:@/?");
        }
        return MHD_YES;
}

/* Whether the client asks to upgrade the connection (a WebSocket). */
static bool wants_upgrade(struct MHD_Connection *connection)
{
        const char *upgrade = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Upgrade");
        const char *conn = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Connection");
        return upgrade != NULL && conn != NULL && one_line(upgrade) && strcasestr(conn, "upgrade") != NULL;
}

/* The request as the server in the sandbox gets it: HTTP/1.0 and a
 * close-delimited answer (never chunked), or HTTP/1.1 for an upgrade. */
static char *upstream_request(struct http_request *r, bool upgrade, size_t *len)
{
        struct head h = { 0 };
        head_text(&h, r->method);
        head_text(&h, " ");
        head_encoded(&h, r->url, "/!$&'()*+,;=:@");
        struct query q = { .h = &h, .first = true };
        MHD_get_connection_values(r->connection, MHD_GET_ARGUMENT_KIND, add_argument, &q);
        head_text(&h, upgrade ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n");
        MHD_get_connection_values(r->connection, MHD_HEADER_KIND, add_request_header, &h);
        if (upgrade) {
                head_text(&h, "Connection: Upgrade\r\nUpgrade: ");
                head_text(&h, MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, "Upgrade"));
                head_text(&h, "\r\n");
        } else {
                head_text(&h, "Connection: close\r\n");
        }
        if (r->body_len > 0 || strcmp(r->method, "POST") == 0 || strcmp(r->method, "PUT") == 0 ||
            strcmp(r->method, "PATCH") == 0) {
                char length[48];
                snprintf(length, sizeof(length), "Content-Length: %zu\r\n", r->body_len);
                head_text(&h, length);
        }
        head_text(&h, "\r\n");
        head_add(&h, r->body ? r->body : "", r->body_len);
        if (h.failed) {
                free(h.buf);
                return NULL;
        }
        *len = h.len;
        return h.buf;
}

/* A connection to the sandbox's port: what came after the answer's head. */
struct upstream {
        int fd;
        char *buf;             /* the head's bytes, then the body's first ones from `body` */
        size_t body, len, cap; /* cap: buf's size, less its NUL */
        unsigned timeout_ms;
        uid_t uid;          /* a relay's owner, counted in while it runs */
        char what[160];     /* "port P of sandbox ID", for a relay's last line */
        char *client_extra; /* what the client sent after its upgrade request */
        size_t client_extra_len;
};

static void upstream_free(struct upstream *u)
{
        if (u == NULL)
                return;
        if (u->fd >= 0)
                close(u->fd);
        free(u->buf);
        free(u->client_extra);
        free(u);
}

static void upstream_freep(struct upstream **u)
{
        upstream_free(*u);
}

/* Read the answer's head, on from what an earlier call read (after its
 * -ETIMEDOUT): 1 when whole, 0 at EOF before any byte, -ETIMEDOUT, -EPROTO
 * (too long, or cut short), -errno. */
static int read_head(struct upstream *u)
{
        for (;;) {
                if (u->len >= 4) {
                        char *end = memmem(u->buf, u->len, "\r\n\r\n", 4);
                        if (end != NULL) {
                                u->body = (size_t)(end - u->buf) + 4;
                                return 1;
                        }
                }
                if (u->len >= PORT_MAX_HEAD)
                        return -EPROTO;
                struct pollfd p = { .fd = u->fd, .events = POLLIN };
                int n = poll(&p, 1, (int)u->timeout_ms);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -ETIMEDOUT;
                if (u->len == u->cap) {
                        size_t cap = u->cap ? 2 * u->cap : 16384;
                        char *more = realloc(u->buf, cap + 1);
                        if (more == NULL)
                                return -ENOMEM;
                        u->buf = more;
                        u->cap = cap;
                }
                ssize_t got = read(u->fd, u->buf + u->len, u->cap - u->len);
                if (got < 0 && errno == EINTR)
                        continue;
                if (got < 0)
                        return u->len == 0 && errno == ECONNRESET ? 0 : -errno;
                if (got == 0)
                        return u->len == 0 ? 0 : -EPROTO;
                u->len += got;
                u->buf[u->len] = '\0';
        }
}

static ssize_t read_body(void *cls, uint64_t pos, char *out, size_t max)
{
        struct upstream *u = cls;
        (void)pos;
        if (u->body < u->len) {
                size_t n = u->len - u->body < max ? u->len - u->body : max;
                memcpy(out, u->buf + u->body, n);
                u->body += n;
                return (ssize_t)n;
        }
        for (;;) {
                struct pollfd p = { .fd = u->fd, .events = POLLIN };
                int n = poll(&p, 1, (int)u->timeout_ms);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                ssize_t got = read(u->fd, out, max);
                if (got < 0 && errno == EINTR)
                        continue;
                if (got < 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                return got == 0 ? MHD_CONTENT_READER_END_OF_STREAM : got;
        }
}

static void free_upstream(void *cls)
{
        upstream_free(cls);
}

/* Write all of data to a socket that may be non-blocking; false when it is gone. */
static bool relay_write(int fd, const char *data, size_t len)
{
        while (len > 0) {
                ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                        struct pollfd p = { .fd = fd, .events = POLLOUT };
                        if (poll(&p, 1, -1) < 0 && errno != EINTR)
                                return false;
                        continue;
                }
                if (n <= 0)
                        return false;
                data += n;
                len -= (size_t)n;
        }
        return true;
}

/* Six probes: a peer that misses a few (Wi-Fi roaming, a congested
 * link) is not let go for them. */
#define KEEPALIVE_PROBES 6

unsigned e2b_ports_keepalive_limit(unsigned keepalive_seconds)
{
        unsigned interval = keepalive_seconds / KEEPALIVE_PROBES ? keepalive_seconds / KEEPALIVE_PROBES : 1;
        return keepalive_seconds + interval * KEEPALIVE_PROBES;
}

/* A relay is held until one side ends, and a side whose machine is gone or
 * whose network is cut never sends the FIN or RST that would end it: the
 * relay's thread, its fds and its owner's --max-per-token slot would be
 * held forever. TCP keepalive finds such a peer (ETIMEDOUT on the socket)
 * and only such a one: a quiet VNC stream whose peer answers is never cut.
 * TCP_USER_TIMEOUT gives the same bound to data the peer never
 * acknowledges (a server streaming to a vanished client), which keepalive
 * leaves to the kernel's retransmissions (~15 minutes). */
static int keepalive_set(int fd)
{
        unsigned idle = http_config.keepalive_seconds;
        int on = 1, idle_s = (int)idle, probes = KEEPALIVE_PROBES;
        int interval = (int)((e2b_ports_keepalive_limit(idle) - idle) / KEEPALIVE_PROBES);
        unsigned user_timeout_ms = e2b_ports_keepalive_limit(idle) * 1000;
        if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) < 0 ||
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s)) < 0 ||
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval)) < 0 ||
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes)) < 0 ||
            setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms)) < 0)
                return -errno;
        return 0;
}

/* Why a relay ended, when not by a close: one line. */
static void relay_log_end(const struct upstream *u, const char *side, int error)
{
        fprintf(stderr,
                "nsbox-http: WebSocket to %s (uid %u) closed: %s %s (%s); its --max-per-token slot is "
                "free\n",
                u->what, (unsigned)u->uid, side,
                error == ETIMEDOUT ? "stopped answering" : "connection failed",
                error == ETIMEDOUT ? "no answer to TCP keepalive or to data sent" : strerror(error));
}

/* A relay's end, or a relay that will not start: its connection to the
 * sandbox and its owner's count go. */
static void relay_release(struct upstream *u)
{
        http_bounds_owner_give(u->uid);
        upstream_free(u);
}

/* Why a TCP socket that poll reports failed (hung up) did. MHD's thread
 * may have read its error first (a TLS read): a connection the kernel
 * ended for probes or data left unanswered still counts them. */
static int tcp_failure(int fd)
{
        int error = 0;
        socklen_t len = sizeof(error);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error != 0)
                return error;
        struct tcp_info info = { 0 };
        len = sizeof(info);
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
            (info.tcpi_probes > 0 || info.tcpi_retransmits > 0 || info.tcpi_backoff > 0))
                return ETIMEDOUT;
        return ECONNRESET;
}

struct relay {
        struct upstream *u;
        MHD_socket client;
        /* the client's TCP socket: client itself, or with TLS MHD's, which
         * MHD forwards to client (a socketpair's end) */
        int client_tcp;
        struct MHD_UpgradeResponseHandle *urh;
};

/* Both ways until either side ends: the upgraded connection (a WebSocket)
 * is bytes now, which nsbox-http passes on without reading. */
static void *relay_main(void *arg)
{
        struct relay *rl = arg;
        struct upstream *u = rl->u;
        bool ok = relay_write(rl->client, u->buf + u->body, u->len - u->body) &&
                  relay_write(u->fd, u->client_extra, u->client_extra_len);
        char buf[65536];
        const char *failed = NULL; /* the side whose connection failed, for the log */
        int error = 0;
        /* With TLS, MHD's forwarding (libmicrohttpd 0.9.75) stops reading a
         * client socket that failed but keeps the socketpair open until the
         * relay closes it: the relay watches the TCP socket itself (no
         * events asked: poll reports its error and hang-up, and nothing is
         * read from MHD's socket). */
        nfds_t n_fds = rl->client_tcp != rl->client ? 3 : 2;
        while (ok) {
                struct pollfd p[3] = { { .fd = rl->client, .events = POLLIN },
                                       { .fd = u->fd, .events = POLLIN },
                                       { .fd = rl->client_tcp, .events = 0 } };
                if (poll(p, n_fds, -1) < 0) {
                        ok = errno == EINTR;
                        continue;
                }
                if (n_fds == 3 && (p[2].revents & (POLLHUP | POLLERR))) {
                        error = tcp_failure(rl->client_tcp);
                        failed = "its client";
                        break;
                }
                for (int i = 0; i < 2 && ok; i++) {
                        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                                continue;
                        ssize_t n = recv(p[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
                        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                                continue;
                        if (n < 0) {
                                error = errno;
                                failed = i == 0 ? "its client" : "the sandbox's side";
                        }
                        ok = n > 0 && relay_write(i == 0 ? u->fd : rl->client, buf, (size_t)n);
                        if (n > 0 && !ok && errno != EPIPE) {
                                error = errno;
                                failed = i == 0 ? "the sandbox's side" : "its client";
                        }
                }
        }
        /* With TLS, a client that stopped answering while the relay wrote
         * to it ends MHD's forwarding, which the relay sees as a closed
         * socketpair: its TCP socket says why. */
        struct pollfd tcp = { .fd = rl->client_tcp };
        if (failed == NULL && n_fds == 3 && poll(&tcp, 1, 0) == 1 && (tcp.revents & (POLLHUP | POLLERR)) &&
            (error = tcp_failure(rl->client_tcp)) == ETIMEDOUT)
                failed = "its client";
        if (failed != NULL)
                relay_log_end(u, failed, error);
        MHD_upgrade_action(rl->urh, MHD_UPGRADE_ACTION_CLOSE);
        relay_release(u);
        free(rl);
        return NULL;
}

/* MHD ends the request (http_e2b_port_request_done, COMPLETED_OK) once the
 * 101 is sent and then hands the connection over here; when the 101 cannot
 * be sent it ends the request otherwise and never calls this. */
static void upgraded(void *cls, struct MHD_Connection *connection, void *req_cls, const char *extra_in,
                     size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
        struct upstream *u = cls;
        (void)req_cls;
        struct relay *rl = calloc(1, sizeof(*rl));
        const union MHD_ConnectionInfo *tcp =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        int client_tcp = tcp != NULL ? tcp->connect_fd : sock;
        int kept = keepalive_set(client_tcp);
        if (kept == 0)
                kept = keepalive_set(u->fd);
        if (kept < 0)
                fprintf(stderr,
                        "nsbox-http: WebSocket to %s: TCP keepalive: %s (a peer that vanishes holds it)\n",
                        u->what, strerror(-kept));
        pthread_t thread;
        pthread_attr_t attr;
        if (rl != NULL && extra_in_size > 0) {
                u->client_extra = malloc(extra_in_size);
                if (u->client_extra != NULL) {
                        memcpy(u->client_extra, extra_in, extra_in_size);
                        u->client_extra_len = extra_in_size;
                }
        }
        if (rl != NULL && (extra_in_size == 0 || u->client_extra != NULL)) {
                *rl = (struct relay){ .u = u, .client = sock, .client_tcp = client_tcp, .urh = urh };
                /* MHD's thread of the connection passes TLS on for the upgraded
                 * socket: the relay runs beside it, never in it. */
                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                int started = pthread_create(&thread, &attr, relay_main, rl);
                pthread_attr_destroy(&attr);
                if (started == 0)
                        return;
        }
        free(rl);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        relay_release(u);
}

/* The server's status and headers onto resp (none of its hop-by-hop ones;
 * resp NULL: only checked); *status, and *length: its Content-Length or
 * -1. False when the head is not HTTP's (a NUL, a line without a colon, a
 * header MHD refuses): the server in the sandbox is not trusted. */
static bool copy_answer_head(const struct upstream *u, struct MHD_Response *resp, unsigned *status,
                             long long *length)
{
        const char *line = u->buf, *head_end = u->buf + u->body - 2; /* its last line's CRLF */
        const char *end = memmem(line, (size_t)(head_end - line), "\r\n", 2);
        unsigned code = 0;
        if (end == NULL || memchr(u->buf, '\0', u->body) != NULL || strncmp(line, "HTTP/1.", 7) != 0 ||
            sscanf(line + 8, " %3u", &code) != 1 || code < 100 || code > 599)
                return false;
        *status = code;
        *length = -1;
        for (line = end + 2; line < head_end; line = end + 2) {
                end = memmem(line, (size_t)(head_end - line), "\r\n", 2);
                if (end == NULL)
                        end = head_end; /* the last line */
                const char *colon = memchr(line, ':', (size_t)(end - line));
                if (colon == NULL || colon == line)
                        return false;
                _cleanup_free_ char *name = strndup(line, (size_t)(colon - line));
                const char *value = colon + 1;
                while (*value == ' ' || *value == '\t')
                        value++;
                _cleanup_free_ char *text = strndup(value, (size_t)(end - value));
                if (name == NULL || text == NULL)
                        return false;
                if (strcasecmp(name, "Content-Length") == 0) {
                        *length = strtoll(text, NULL, 10);
                        continue;
                }
                bool upgrade_header =
                    code == MHD_HTTP_SWITCHING_PROTOCOLS && strcasecmp(name, "Upgrade") == 0;
                if ((hop_header(name) && !upgrade_header) || resp == NULL)
                        continue;
                if (MHD_add_response_header(resp, name, text) != MHD_YES)
                        return false;
        }
        return true;
}

static bool sandbox_paused(struct http_request *r, const char *sandbox_id)
{
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", sandbox_id), *result = NULL,
                              *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "sandbox.info", params, &result, &error, &err) < 0)
                return false;
        const char *state = json_string_value(json_object_get(result, "state"));
        return state != NULL && strcmp(state, "paused") == 0;
}

static enum MHD_Result bad_gateway(struct http_request *r, const char *sandbox_id, unsigned port,
                                   const char *why)
{
        return e2b_reply_rest_error(r, 502, "port %u of sandbox %s: %s", port, sandbox_id, why);
}

enum MHD_Result http_e2b_port(struct http_request *r, const char *sandbox_id, unsigned port)
{
        _cleanup_json_ json_t *params = json_pack("{s:s, s:i}", "sandbox_id", sandbox_id, "port", (int)port);
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "sandbox.expose", params, &result, &error, &err) < 0) {
                const char *kind = NULL;
                unsigned status = http_status_of_rpc_error(error, &kind);
                const char *message = json_string_value(json_object_get(error, "message"));
                /* E2B's SDKs read a sandbox that is no more as not found */
                if (status == MHD_HTTP_NOT_FOUND || (kind != NULL && strcmp(kind, "gone") == 0))
                        return e2b_reply_rest_error(r, 404, "sandbox %s not found%s%s", sandbox_id,
                                                    message && status != MHD_HTTP_NOT_FOUND ? ": " : "",
                                                    message && status != MHD_HTTP_NOT_FOUND ? message : "");
                return bad_gateway(r, sandbox_id, port,
                                   message               ? message
                                   : err && err->message ? err->message
                                                         : "nsboxd is not answering");
        }
        json_int_t host_port = json_integer_value(json_object_get(result, "host_port"));
        _cleanup_(upstream_freep) struct upstream *u = calloc(1, sizeof(*u));
        if (u == NULL || host_port < 1 || host_port > 65535)
                return bad_gateway(r, sandbox_id, port, "no exposure");
        u->uid = r->uid;
        snprintf(u->what, sizeof(u->what), "port %u of sandbox %s", port, sandbox_id);
        u->timeout_ms = http_config.timeout_seconds * 1000;
        u->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in to = { .sin_family = AF_INET,
                                  .sin_port = htons((uint16_t)host_port),
                                  .sin_addr = { htonl(INADDR_LOOPBACK) } };
        if (u->fd < 0 || connect(u->fd, (struct sockaddr *)&to, sizeof(to)) < 0)
                return bad_gateway(r, sandbox_id, port, strerror(errno));
        bool upgrade = wants_upgrade(r->connection);
        size_t len = 0;
        _cleanup_free_ char *request = upstream_request(r, upgrade, &len);
        if (request == NULL)
                return bad_gateway(r, sandbox_id, port, "out of memory");
        /* a closed port: the exposure's proxy ends the connection, maybe before the whole request is in */
        int wrote = io_write_all(u->fd, request, len);
        /* a paused sandbox's server would hold the request until --timeout:
         * one that has not answered within a second is asked about */
        unsigned timeout_ms = u->timeout_ms;
        u->timeout_ms = timeout_ms < 1000 ? timeout_ms : 1000;
        int got = read_head(u);
        if (got == -ETIMEDOUT && sandbox_paused(r, sandbox_id))
                return bad_gateway(r, sandbox_id, port, "the sandbox is paused (Sandbox.connect resumes it)");
        if (got == -ETIMEDOUT && timeout_ms > u->timeout_ms) {
                u->timeout_ms = timeout_ms - u->timeout_ms;
                got = read_head(u);
        }
        u->timeout_ms = timeout_ms;
        if (got == 0 || (got < 0 && wrote < 0))
                return bad_gateway(
                    r, sandbox_id, port,
                    "nothing answers there (no server listens on it, or it closed the connection)");
        if (got == -ETIMEDOUT)
                return e2b_reply_rest_error(r, 504, "port %u of sandbox %s sent no answer within %u s", port,
                                            sandbox_id, http_config.timeout_seconds);
        if (got < 0)
                return bad_gateway(r, sandbox_id, port, "its answer is not HTTP");
        unsigned status = 0;
        long long length = -1;
        if (!copy_answer_head(u, NULL, &status, &length))
                return bad_gateway(r, sandbox_id, port, "its answer is not HTTP");
        struct MHD_Response *resp;
        if (upgrade && status == MHD_HTTP_SWITCHING_PROTOCOLS) {
                /* an upgraded connection holds a request of its owner's until it ends */
                if (!http_bounds_owner_take(r->uid, http_config.max_per_token))
                        return e2b_reply_rest_error(r, 429,
                                                    "this key has %u requests and connections open already, "
                                                    "the most one may have (--max-per-token)",
                                                    http_config.max_per_token);
                resp = MHD_create_response_for_upgrade(upgraded, u);
                if (resp == NULL)
                        http_bounds_owner_give(r->uid);
        } else {
                if (status == MHD_HTTP_SWITCHING_PROTOCOLS || status < 200)
                        return bad_gateway(r, sandbox_id, port,
                                           "it answered 1xx to a request that did not ask for it");
                bool empty = strcmp(r->method, "HEAD") == 0 || status == 204 || status == 304;
                resp = MHD_create_response_from_callback(empty         ? 0
                                                         : length >= 0 ? (uint64_t)length
                                                                       : MHD_SIZE_UNKNOWN,
                                                         65536, read_body, u, free_upstream);
        }
        if (resp == NULL)
                return bad_gateway(r, sandbox_id, port, "out of memory");
        struct upstream *owned = u;
        u = NULL; /* the response's now (its free callback, or the upgrade's handler) */
        if (!copy_answer_head(owned, resp, &status, &length)) {
                bool upgrading = status == MHD_HTTP_SWITCHING_PROTOCOLS;
                MHD_destroy_response(resp); /* frees owned, unless it is an upgrade's */
                if (upgrading)
                        relay_release(owned);
                return bad_gateway(r, sandbox_id, port, "its answer has a header nsbox-http cannot pass on");
        }
        if (status != MHD_HTTP_SWITCHING_PROTOCOLS)
                return http_reply_response(r, status, resp);
        http_bounds_upgraded(r->connection);
        enum MHD_Result queued = http_reply_response(r, status, resp);
        if (queued == MHD_YES)
                r->upgrade = owned;
        else
                relay_release(owned);
        return queued;
}

void http_e2b_port_request_done(struct http_request *r, enum MHD_RequestTerminationCode toe)
{
        if (r->upgrade != NULL && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
                relay_release(r->upgrade);
        r->upgrade = NULL;
}
