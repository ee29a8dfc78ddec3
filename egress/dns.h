/* SPDX-License-Identifier: Apache-2.0 */
/* DNS for the sandboxes (dns.c), above core.h and below proxy.c: each
 * sandbox's UDP queries at gateway:53 asked again through c-ares, the A
 * records of the answers kept for the proxy's "is this address the name's"
 * question, and the queries of a DNS-over-TCP connection, answered through
 * the callback its caller gives. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "error.h"

#define EGRESS_DNS_TCP_QUERY_MAX 512

int dns_init(const char *servers, nsbox_error_t **err);
/* The sandbox's UDP socket is readable. */
void dns_receive(struct egress_sandbox *sb);
/* The sandbox is removed: its queries in flight answer no one. */
void dns_sandbox_gone(struct egress_sandbox *sb);

/* An answer to one query of a DNS-over-TCP connection (without its length
 * prefix); len 0: not a query, the connection is to be dropped. */
typedef void (*dns_tcp_reply_fn)(struct conn *c, const uint8_t *msg, size_t len);
/* One query (without its length prefix) of a CONN_DNS connection: answered
 * through reply, at once or when the resolver answers (c->lookup waits for
 * it meanwhile, c->state is CONN_RESOLVE). */
void dns_tcp_query(struct conn *c, const uint8_t *pkt, size_t len, dns_tcp_reply_fn reply);

/* Did an answer the sandbox got (and not yet expired) give name this address? */
bool dns_address_recorded(struct egress_sandbox *sb, const char *name, uint32_t addr);

/* c-ares's sockets and timeouts, from the loop. */
void dns_ares_event(struct watch *w, uint32_t events);
void dns_ares_timeouts(void);
/* After each epoll batch: the watches of sockets c-ares closed in it. */
void dns_free_graveyard(void);
