/* SPDX-License-Identifier: Apache-2.0 */
/* DNS for the sandboxes: every UDP query to port 53 arrives on the
 * sandbox's socket at gateway:53. A question the policy allows is asked
 * again by c-ares (from the host's netns) and the answer relayed with the
 * sandbox's query id; its A records are kept so a later connection to one
 * of those addresses under that name is known to be the name's. Anything
 * else is answered REFUSED at once; what is not a query is dropped. */
#include "dns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "cleanup.h"
#include "log.h"

#define DNS_RCODE_SERVFAIL 2
#define DNS_RCODE_REFUSED  5
#define DNS_CLASS_IN       1

/* A UDP query the resolver was asked. */
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

struct ares_watch {
        struct ares_watch *next;
        struct watch w;
};
static struct ares_watch *ares_watches;
/* Watches of sockets c-ares closed in this epoll batch: a later event of
 * the batch may still point at one (fd -1: skipped); freed after it. */
static struct ares_watch *ares_graveyard;

static void sock_state(void *data, ares_socket_t fd, int readable, int writable)
{
        struct ares_watch **pp = &ares_watches, *aw = NULL;
        for (; *pp != NULL; pp = &(*pp)->next)
                if ((*pp)->w.fd == fd) {
                        aw = *pp;
                        break;
                }
        if (!readable && !writable) {
                if (aw != NULL) {
                        egress_unwatch(&aw->w);
                        aw->w.fd = -1;
                        *pp = aw->next;
                        aw->next = ares_graveyard;
                        ares_graveyard = aw;
                }
                return;
        }
        if (aw == NULL) {
                aw = calloc(1, sizeof(*aw));
                if (aw == NULL)
                        return; /* the query times out */
                aw->w = (struct watch){ .kind = WATCH_ARES, .fd = fd };
                aw->next = ares_watches;
                ares_watches = aw;
        }
        egress_watch(&aw->w, (readable ? EPOLLIN : 0) | (writable ? EPOLLOUT : 0));
}

int dns_init(const char *servers, nsbox_error_t **err)
{
        int r = ares_library_init(ARES_LIB_INIT_ALL);
        if (r != ARES_SUCCESS)
                return nsbox_error(err, 0, "c-ares: %s", ares_strerror(r));
        struct ares_options o = {
                .sock_state_cb = sock_state,
                /* Names are asked as given: no search domains of the host,
                 * no /etc/hosts of the host. */
                /* STAYOPEN: the sockets to the resolvers stay between
                 * queries instead of being closed (and their watches
                 * dropped) whenever the last query ends. */
                .flags = ARES_FLAG_NOSEARCH | ARES_FLAG_STAYOPEN,
                .lookups = (char *)"b",
                .timeout = 3000,
                .tries = 2,
        };
        r = ares_init_options(&egress.ares, &o,
                              ARES_OPT_SOCK_STATE_CB | ARES_OPT_FLAGS | ARES_OPT_LOOKUPS |
                                  ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
        if (r != ARES_SUCCESS)
                return nsbox_error(err, 0, "c-ares: %s", ares_strerror(r));
        if (servers != NULL && servers[0] != '\0') {
                r = ares_set_servers_ports_csv(egress.ares, servers);
                if (r != ARES_SUCCESS)
                        return nsbox_invalid(err, "--dns-servers \"%s\": %s", servers, ares_strerror(r));
        }
        return 0;
}

void dns_free_graveyard(void)
{
        while (ares_graveyard != NULL) {
                struct ares_watch *aw = ares_graveyard;
                ares_graveyard = aw->next;
                free(aw);
        }
}

void dns_ares_event(struct watch *w, uint32_t events)
{
        int fd = w->fd;
        ares_process_fd(egress.ares, (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) ? fd : ARES_SOCKET_BAD,
                        (events & (EPOLLOUT | EPOLLERR)) ? fd : ARES_SOCKET_BAD);
}

void dns_ares_timeouts(void)
{
        ares_process_fd(egress.ares, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
}

/* Header + question of the query with QR set and rcode: REFUSED,
 * SERVFAIL, or a truncated answer (tc) that sends the client to TCP. 0
 * when the query does not fit. */
static size_t error_reply(uint8_t out[512], const uint8_t *query, size_t len, unsigned rcode, bool tc)
{
        if (len > 512 || len < 12)
                return 0;
        memcpy(out, query, len);
        out[2] = (uint8_t)(0x80 | (query[2] & 0x01) | (tc ? 0x02 : 0)); /* QR, opcode 0, RD kept */
        out[3] = (uint8_t)(0x80 | rcode);                               /* RA */
        memset(out + 6, 0, 6);                                          /* no an/ns/ar */
        return len;
}

static void reply_error(int fd, const struct sockaddr_in *to, const uint8_t *query, size_t len,
                        unsigned rcode, bool tc)
{
        uint8_t out[512];
        size_t n = error_reply(out, query, len, rcode, tc);
        if (n > 0)
                sendto(fd, out, n, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)to, sizeof(*to));
}

static void dns_record_answer(struct egress_sandbox *sb, const char *name, const uint8_t *abuf, size_t alen)
{
        struct ares_addrttl ttls[32];
        int n = ARRAY_SIZE(ttls);
        if (ares_parse_a_reply(abuf, (int)alen, NULL, ttls, &n) != ARES_SUCCESS)
                return;
        time_t now = time(NULL);
        for (int i = 0; i < n; i++) {
                uint32_t addr = ntohl(ttls[i].ipaddr.s_addr);
                time_t ttl = ttls[i].ttl < EGRESS_DNS_MIN_TTL ? EGRESS_DNS_MIN_TTL : ttls[i].ttl;
                /* One day at most: a record must not pin an address for ever. */
                if (ttl > 86400)
                        ttl = 86400;
                struct dns_record *slot = NULL;
                for (unsigned k = 0; k < EGRESS_DNS_RECORDS && slot == NULL; k++)
                        if (sb->records[k].addr == addr && strcmp(sb->records[k].name, name) == 0)
                                slot = &sb->records[k];
                if (slot == NULL) {
                        slot = &sb->records[sb->next_record];
                        sb->next_record = (sb->next_record + 1) % EGRESS_DNS_RECORDS;
                }
                snprintf(slot->name, sizeof(slot->name), "%s", name);
                slot->addr = addr;
                if (slot->expires < now + ttl)
                        slot->expires = now + ttl;
        }
}

bool dns_address_recorded(struct egress_sandbox *sb, const char *name, uint32_t addr)
{
        time_t now = time(NULL);
        for (unsigned k = 0; k < EGRESS_DNS_RECORDS; k++)
                if (sb->records[k].addr == addr && sb->records[k].expires >= now &&
                    strcmp(sb->records[k].name, name) == 0)
                        return true;
        return false;
}

static void query_unlink(struct dns_query *q)
{
        struct egress_sandbox *sb = q->sandbox;
        if (sb == NULL)
                return;
        if (q->prev != NULL)
                q->prev->next = q->next;
        else
                sb->queries = q->next;
        if (q->next != NULL)
                q->next->prev = q->prev;
        sb->n_queries--;
        q->sandbox = NULL;
}

static void answered(void *arg, int status, int timeouts, unsigned char *abuf, int alen)
{
        struct dns_query *q = arg;
        struct egress_sandbox *sb = q->sandbox;
        query_unlink(q);
        if (sb == NULL || status == ARES_EDESTRUCTION) {
                free(q);
                return;
        }
        if (status == ARES_SUCCESS && abuf != NULL && alen >= 12) {
                dns_record_answer(sb, q->name, abuf, (size_t)alen);
                if ((size_t)alen > q->max_reply) {
                        reply_error(sb->dns.fd, &q->client, q->query, q->query_len, 0, true);
                } else {
                        abuf[0] = (uint8_t)(q->id >> 8);
                        abuf[1] = (uint8_t)q->id;
                        sendto(sb->dns.fd, abuf, (size_t)alen, MSG_DONTWAIT | MSG_NOSIGNAL,
                               (const struct sockaddr *)&q->client, sizeof(q->client));
                }
        } else {
                reply_error(sb->dns.fd, &q->client, q->query, q->query_len, DNS_RCODE_SERVFAIL, false);
        }
        free(q);
}

/* The largest answer the client takes over UDP: 512 bytes, or what its
 * EDNS OPT record says (an OPT record right after the question). */
static size_t client_max_reply(const uint8_t *pkt, size_t len, size_t question_end)
{
        const uint8_t *p = pkt + question_end;
        if ((pkt[10] << 8 | pkt[11]) >= 1 && len >= question_end + 11 && p[0] == 0 && p[1] == 0 &&
            p[2] == 41) {
                size_t size = (size_t)(p[3] << 8 | p[4]);
                return size < 512 ? 512 : size > 4096 ? 4096 : size;
        }
        return 512;
}

static void handle_query(struct egress_sandbox *sb, const uint8_t *pkt, size_t len,
                         const struct sockaddr_in *from)
{
        struct sniff_dns d;
        if (sniff_dns_question(pkt, len, &d) != SNIFF_OK)
                return;
        sb->delta.dns_queries++;
        char name[NETPOLICY_NAME_MAX + 1];
        if (d.qclass != DNS_CLASS_IN || netpolicy_name_normalize(d.name, strlen(d.name), name) < 0) {
                reply_error(sb->dns.fd, from, pkt, d.question_end, DNS_RCODE_REFUSED, false);
                return;
        }
        enum netpolicy_verdict v = netpolicy_check_name(sb->policy, name);
        if (v != NETPOLICY_ALLOW) {
                /* Told to nsboxd before the answer, so that the refusal is
                 * there when the code that asked ends (egress_note_refused). */
                egress_refused_lookup(sb, name, netpolicy_reason(v));
                reply_error(sb->dns.fd, from, pkt, d.question_end, DNS_RCODE_REFUSED, false);
                return;
        }
        if (sb->n_queries >= EGRESS_DNS_PENDING_MAX ||
            d.question_end > sizeof(((struct dns_query *)0)->query)) {
                reply_error(sb->dns.fd, from, pkt, d.question_end, DNS_RCODE_SERVFAIL, false);
                return;
        }
        struct dns_query *q = calloc(1, sizeof(*q));
        if (q == NULL)
                return;
        q->sandbox = sb;
        q->client = *from;
        q->id = d.id;
        q->max_reply = client_max_reply(pkt, len, d.question_end);
        snprintf(q->name, sizeof(q->name), "%s", name);
        memcpy(q->query, pkt, d.question_end);
        q->query_len = d.question_end;
        /* A fresh query of our own making: the sandbox's header bits and
         * additional records (EDNS options) are not passed on. */
        unsigned char *qbuf = NULL;
        int qlen = 0;
        if (ares_create_query(name, DNS_CLASS_IN, d.qtype, 0, 1, &qbuf, &qlen, 0) != ARES_SUCCESS) {
                reply_error(sb->dns.fd, from, pkt, d.question_end, DNS_RCODE_SERVFAIL, false);
                free(q);
                return;
        }
        q->next = sb->queries;
        if (sb->queries != NULL)
                sb->queries->prev = q;
        sb->queries = q;
        sb->n_queries++;
        ares_send(egress.ares, qbuf, qlen, answered, q);
        ares_free_string(qbuf);
}

/* --- DNS over TCP ------------------------------------------------------------ */

struct tcp_query {
        struct conn_lookup lookup; /* first: c->lookup points here */
        dns_tcp_reply_fn reply;
        struct egress_sandbox *sandbox;
        char name[NETPOLICY_NAME_MAX + 1];
        uint16_t id;
        size_t query_len;
        uint8_t query[EGRESS_DNS_TCP_QUERY_MAX];
};

static void tcp_answered(void *arg, int status, int timeouts, unsigned char *abuf, int alen)
{
        struct tcp_query *q = arg;
        struct conn *c = q->lookup.conn;
        if (c != NULL) {
                c->lookup = NULL;
                if (c->sandbox != NULL && status == ARES_SUCCESS && abuf != NULL && alen >= 12) {
                        dns_record_answer(c->sandbox, q->name, abuf, (size_t)alen);
                        abuf[0] = (uint8_t)(q->id >> 8);
                        abuf[1] = (uint8_t)q->id;
                        q->reply(c, abuf, (size_t)alen);
                } else {
                        uint8_t out[512];
                        q->reply(c, out, error_reply(out, q->query, q->query_len, DNS_RCODE_SERVFAIL, false));
                }
        }
        free(q);
}

void dns_tcp_query(struct conn *c, const uint8_t *pkt, size_t len, dns_tcp_reply_fn reply)
{
        struct egress_sandbox *sb = c->sandbox;
        struct sniff_dns d;
        uint8_t out[512];
        if (sniff_dns_question(pkt, len, &d) != SNIFF_OK || d.question_end > EGRESS_DNS_TCP_QUERY_MAX) {
                reply(c, NULL, 0); /* not a query: the connection is dropped */
                return;
        }
        sb->delta.dns_queries++;
        char name[NETPOLICY_NAME_MAX + 1];
        enum netpolicy_verdict v = NETPOLICY_NOT_ALLOWED;
        if (d.qclass == DNS_CLASS_IN && netpolicy_name_normalize(d.name, strlen(d.name), name) == 0) {
                v = netpolicy_check_name(sb->policy, name);
                if (v != NETPOLICY_ALLOW)
                        egress_refused_lookup(sb, name, netpolicy_reason(v));
        }
        if (v != NETPOLICY_ALLOW) {
                reply(c, out, error_reply(out, pkt, d.question_end, DNS_RCODE_REFUSED, false));
                return;
        }
        struct tcp_query *q = calloc(1, sizeof(*q));
        unsigned char *qbuf = NULL;
        int qlen = 0;
        if (q == NULL ||
            ares_create_query(name, DNS_CLASS_IN, d.qtype, 0, 1, &qbuf, &qlen, 0) != ARES_SUCCESS) {
                free(q);
                reply(c, out, error_reply(out, pkt, d.question_end, DNS_RCODE_SERVFAIL, false));
                return;
        }
        q->lookup.conn = c;
        q->reply = reply;
        q->sandbox = sb;
        q->id = d.id;
        snprintf(q->name, sizeof(q->name), "%s", name);
        memcpy(q->query, pkt, d.question_end);
        q->query_len = d.question_end;
        c->lookup = &q->lookup;
        c->state = CONN_RESOLVE;
        c->deadline_ms = egress_now_ms() + EGRESS_CONNECT_TIMEOUT_MS;
        ares_send(egress.ares, qbuf, qlen, tcp_answered, q);
        ares_free_string(qbuf);
}

void dns_receive(struct egress_sandbox *sb)
{
        for (int i = 0; i < 64 && !sb->removed; i++) {
                uint8_t pkt[4096];
                struct sockaddr_in from;
                socklen_t flen = sizeof(from);
                ssize_t n = recvfrom(sb->dns.fd, pkt, sizeof(pkt), MSG_DONTWAIT | MSG_TRUNC,
                                     (struct sockaddr *)&from, &flen);
                if (n < 0) {
                        if (errno != EAGAIN && errno != EINTR && errno != ECONNREFUSED)
                                log_warn("sandbox %s: DNS socket: %s", sb->id, strerror(errno));
                        return;
                }
                if ((size_t)n > sizeof(pkt) || from.sin_family != AF_INET)
                        continue;
                handle_query(sb, pkt, (size_t)n, &from);
        }
}

void dns_sandbox_gone(struct egress_sandbox *sb)
{
        while (sb->queries != NULL)
                query_unlink(sb->queries);
}
