/* SPDX-License-Identifier: Apache-2.0 */
/* The TCP side of nsbox-egress (proxy.c), above core.h and dns.h and below
 * main.c: a sandbox's connections judged by name or address and relayed,
 * sandbox.expose's connections joined to the sandbox, DNS over TCP. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "core.h"

/* A listener is readable: accept what waits. */
void proxy_accept(struct egress_sandbox *sb);
void proxy_expose_accept(struct expose *e);
/* An event on a connection's client side or upstream side. */
void proxy_conn_event(struct conn *c, bool upstream, uint32_t events);
/* The socket factory's answer for c (NULL once the connection is gone). */
void proxy_factory_reply(struct conn *c, int fd, int error);
void proxy_conn_close(struct conn *c);
/* Each tick: connections past their deadline. */
void proxy_timeouts(int64_t now);
/* After each epoll batch: the connections closed in it. */
void proxy_free_graveyard(void);
