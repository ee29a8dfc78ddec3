/* SPDX-License-Identifier: Apache-2.0 */
/* Any port of a sandbox through nsbox-http (e2b_ports.c), as E2B's
 * sandbox.getHost(port) and @e2b/desktop's stream URL reach it: a Host
 * PORT-SANDBOXID.DOMAIN (--e2b-domain) or E2B's E2b-Sandbox-Id and
 * E2b-Sandbox-Port headers, proxied to that port through nsboxd's port
 * exposure (sandbox.expose), streamed both ways and WebSocket upgrades
 * relayed. A handler: below the E2B router. */
#pragma once

#include <microhttpd.h>

#include "request.h"

/* Whether --e2b-domain's text is NAME or NAME:PORT: a name of letters,
 * digits, '-' and '.' (not at its ends), a port 1 to 65535. */
bool e2b_ports_domain_valid(const char *domain);
/* Whether r's Host is PORT-ID.DOMAIN of --e2b-domain: 1, and the request
 * names that sandbox and port as E2B's headers do (set on the connection
 * for the rest of nsbox-http); 0 when it is not (another name, or E2B's
 * headers name the sandbox already); -EINVAL for a name under the domain
 * that is not of that form, -EEXIST when E2B's headers name another
 * sandbox or port than it, -ENOMEM. */
int e2b_ports_from_host(struct http_request *r);
/* Within how many seconds of its last packet a relayed WebSocket's peer
 * that stopped answering (its machine gone, its network cut: no FIN, no
 * RST) is let go, with --keepalive-seconds N: probed after N s of silence,
 * then every N/6 s (at least 1), six unanswered probes end it. */
unsigned e2b_ports_keepalive_limit(unsigned keepalive_seconds);
/* Proxy r to the sandbox's port (exposed for it when it is not yet). */
enum MHD_Result http_e2b_port(struct http_request *r, const char *sandbox_id, unsigned port);
/* The request ended: a WebSocket whose 101 was not sent (its client left)
 * never gets its relay, which is freed here. */
void http_e2b_port_request_done(struct http_request *r, enum MHD_RequestTerminationCode toe);
